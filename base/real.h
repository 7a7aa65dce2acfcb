// The scalar type of the CPU reference. Built as float for training and as
// double (-DREAL_DOUBLE) for finite-difference gradient checks (docs/architecture.md,
// "Precision of the truth").
#ifndef HYBRID_REAL_H
#define HYBRID_REAL_H

#ifdef REAL_DOUBLE
typedef double real;
#define REAL_NAME "double"
#else
typedef float real;
#define REAL_NAME "float"
#endif

#endif
