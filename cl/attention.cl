/* Fused attention: to be written. */
#include "common.h"
