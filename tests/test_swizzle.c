#include "util.h"

int main(void)
{
    Suite *s = suite_create("swizzle");
    return tu_run(s);
}
