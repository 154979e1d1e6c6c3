/* clkit attention tests: to be written. */
#include "util.h"

int main(void)
{
    Suite *s = suite_create("attention");
    TCase *tc = tu_tcase("attention");
    suite_add_tcase(s, tc);
    return tu_run(s);
}
