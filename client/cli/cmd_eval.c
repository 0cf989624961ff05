/* cmd_eval.c - placeholder for "kvpack eval" until its module lands; reports that plainly. */
#include "cli.h"

int kvp_cmd_eval(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "kvpack: 'eval' is not built yet\n");
    return 2;
}
