/* cmd_serve.c - placeholder for "kvpack serve" until its module lands; reports that plainly. */
#include "cli.h"

int kvp_cmd_serve(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "kvpack: 'serve' is not built yet\n");
    return 2;
}
