// Which element type this build of the ops uses: `make lib` exports it so that a program
// that loads the shared library (include/hybrid_ops.h declares it) can check it got the
// float or the double one.
#include "base/real.h"

int hybrid_ops_real_bytes(void);
int hybrid_ops_real_bytes(void) { return (int)sizeof(real); }
