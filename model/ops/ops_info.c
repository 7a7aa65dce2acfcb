// Which element type this build of the ops uses (include/hybrid_ops.h): lets a program
// that loads the shared library check it got the float or the double one.
#include "include/hybrid_ops.h"

int hybrid_ops_real_bytes(void) { return (int)sizeof(real); }
