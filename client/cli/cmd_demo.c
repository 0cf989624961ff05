/* cmd_demo.c - placeholder for "kvpack demo" until its module lands; reports that plainly. */
#include "cli.h"

int kvp_cmd_demo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "kvpack: 'demo' is not built yet\n");
    return 2;
}
