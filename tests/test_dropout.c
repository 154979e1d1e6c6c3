#include "util.h"

int main(void)
{
    Suite *s = suite_create("dropout");
    return tu_run(s);
}
