/* cross_entropy reference: to be written. */
#include "ref.h"
