/* cmd_bench_store.c - placeholder for "kvpack bench store" until its module lands; reports that plainly. */
#include "cli.h"

int kvp_cmd_bench_store(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "kvpack: 'bench store' is not built yet\n");
    return 2;
}
