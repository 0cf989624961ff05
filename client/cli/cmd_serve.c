/* cmd_serve.c - "kvpack serve": run a node in the foreground; the same code as kvpackd
 * (cluster/node_main.c), so options and behaviour are identical. */
#include "cli.h"

#include "kvpack/node.h"

int kvp_cmd_serve(int argc, char **argv)
{
    return kvp_node_main("kvpack serve", argc, argv);
}
