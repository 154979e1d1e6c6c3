/* clkit cross_entropy tests: to be written. */
#include "util.h"

int main(void)
{
    Suite *s = suite_create("cross_entropy");
    TCase *tc = tu_tcase("cross_entropy");
    suite_add_tcase(s, tc);
    return tu_run(s);
}
