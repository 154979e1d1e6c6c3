#include "util.h"

int main(void)
{
    Suite *s = suite_create("softmax");
    return tu_run(s);
}
