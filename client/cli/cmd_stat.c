/* cmd_stat.c - placeholder for "kvpack stat" until its module lands; reports that plainly. */
#include "cli.h"

int kvp_cmd_stat(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "kvpack: 'stat' is not built yet\n");
    return 2;
}
