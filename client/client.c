/* client.c - libkvpack client (UCX): placeholder until the transfer layer lands. */
typedef int kvp_client_placeholder_t;
