/* attention reference: to be written. */
#include "ref.h"
