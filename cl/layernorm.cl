/* Layer norm forward and backward: to be written. */
#include "common.h"
