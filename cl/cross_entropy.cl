/* Cross-entropy: to be written. */
#include "common.h"
