#include "util.h"

int main(void)
{
    Suite *s = suite_create("grayscale");
    return tu_run(s);
}
