/* cmd_bench_transfer.c - placeholder for "kvpack bench transfer" until its module lands; reports that plainly. */
#include "cli.h"

int kvp_cmd_bench_transfer(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "kvpack: 'bench transfer' is not built yet\n");
    return 2;
}
