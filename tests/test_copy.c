#include "util.h"

int main(void)
{
    Suite *s = suite_create("copy");
    return tu_run(s);
}
