/* kvpackd.c - the kvpack node daemon: serves one DRAM pool + one RocksDB directory over UCX.
 * All of the work is in node_main.c / node.c (shared with `kvpack serve`); main() is last. */
#include "kvpack/node.h"

int main(int argc, char **argv)
{
    return kvp_node_main("kvpackd", argc, argv);
}
