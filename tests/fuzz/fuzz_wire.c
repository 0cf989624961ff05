/* fuzz_wire.c - the control-message decoders (proto/wire.c) on arbitrary bytes. Input: byte 0
 * picks request, reply or NCCL link message (mod 3), bytes 1..4 the AM data length that came
 * with the header (little endian), the rest is the protobuf header. Properties: never a crash or
 * a leak; a header that unpacks packs again, and that packing unpacks (what the node accepts it
 * can also answer about, a reply the client accepts re-encodes, and so does a link message). */
#include "fuzz.h"
#include "kvpack/alloc.h"
#include "kvpack/bytes.h"
#include "kvpack/wire.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf;
    size_t   len;
    uint64_t data_len;

    if (size < 5) {
        return 0;
    }
    data_len = kvp_ld32(data + 1);
    if (data[0] % 3 == 2) {
        kvp_wire_link_t m, again;

        if (kvp_wire_link_unpack(data + 5, size - 5, data_len, &m) == KVP_OK) {
            if (kvp_wire_link_pack(&m, &buf, &len) != KVP_OK) {
                FUZZ_FAIL("an unpacked link %s does not pack", kvp_wire_link_kind_name(m.kind));
            }
            if (kvp_wire_link_unpack(buf, len, data_len, &again) != KVP_OK) {
                FUZZ_FAIL("a repacked link %s does not unpack", kvp_wire_link_kind_name(m.kind));
            }
            kvp_wire_link_clear(&again);
            kvp_free(buf);
        }
        kvp_wire_link_clear(&m);
    } else if (data[0] % 3 == 1) {
        kvp_wire_rep_t rep, again;

        memset(&rep, 0, sizeof(rep));
        if (kvp_wire_rep_unpack(data + 5, size - 5, data_len, &rep) == KVP_OK) {
            if (kvp_wire_rep_pack(&rep, &buf, &len) != KVP_OK) {
                FUZZ_FAIL("an unpacked %s reply does not pack", kvp_wire_op_name(rep.op));
            }
            memset(&again, 0, sizeof(again));
            if (kvp_wire_rep_unpack(buf, len, data_len, &again) != KVP_OK) {
                FUZZ_FAIL("a repacked %s reply does not unpack", kvp_wire_op_name(rep.op));
            }
            kvp_wire_rep_clear(&again);
            kvp_free(buf);
        }
        kvp_wire_rep_clear(&rep);
    } else {
        kvp_wire_req_t req, again;

        memset(&req, 0, sizeof(req));
        if (kvp_wire_req_unpack(data + 5, size - 5, data_len, &req) == KVP_OK) {
            if (kvp_wire_req_pack(&req, &buf, &len) != KVP_OK) {
                FUZZ_FAIL("an unpacked %s request does not pack", kvp_wire_op_name(req.op));
            }
            memset(&again, 0, sizeof(again));
            if (kvp_wire_req_unpack(buf, len, data_len, &again) != KVP_OK) {
                FUZZ_FAIL("a repacked %s request does not unpack", kvp_wire_op_name(req.op));
            }
            kvp_wire_req_clear(&again);
            kvp_free(buf);
        }
        kvp_wire_req_clear(&req);
    }
    return 0;
}
