/* cmd_bench_codec.c - placeholder for "kvpack bench codec" until its module lands; reports that plainly. */
#include "cli.h"

int kvp_cmd_bench_codec(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "kvpack: 'bench codec' is not built yet\n");
    return 2;
}
