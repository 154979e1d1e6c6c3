/* clkit layernorm tests: to be written. */
#include "util.h"

int main(void)
{
    Suite *s = suite_create("layernorm");
    TCase *tc = tu_tcase("layernorm");
    suite_add_tcase(s, tc);
    return tu_run(s);
}
