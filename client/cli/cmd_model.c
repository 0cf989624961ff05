/* cmd_model.c - placeholder for "kvpack model" until its module lands; reports that plainly. */
#include "cli.h"

int kvp_cmd_model(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "kvpack: 'model' is not built yet\n");
    return 2;
}
