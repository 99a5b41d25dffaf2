/* SPDX-License-Identifier: BSD-3-Clause */
/* NBD protocol constants (doc/proto.md of the NBD project). */
#ifndef SECT4K_SERVER_NBD_H
#define SECT4K_SERVER_NBD_H

#define NBD_MAGIC               UINT64_C(0x4e42444d41474943)  /* "NBDMAGIC" */
#define NBD_IHAVEOPT            UINT64_C(0x49484156454f5054)  /* "IHAVEOPT" */
#define NBD_REP_MAGIC           UINT64_C(0x0003e889045565a9)
#define NBD_REQUEST_MAGIC       UINT32_C(0x25609513)
#define NBD_SIMPLE_REPLY_MAGIC  UINT32_C(0x67446698)
#define NBD_STRUCTURED_REPLY_MAGIC UINT32_C(0x668e33ef)

/* Handshake flags (server) and client flags. */
#define NBD_FLAG_FIXED_NEWSTYLE   1
#define NBD_FLAG_NO_ZEROES        2
#define NBD_FLAG_C_FIXED_NEWSTYLE 1
#define NBD_FLAG_C_NO_ZEROES      2

/* Transmission flags. */
#define NBD_FLAG_HAS_FLAGS         (1 << 0)
#define NBD_FLAG_READ_ONLY         (1 << 1)
#define NBD_FLAG_SEND_FLUSH        (1 << 2)
#define NBD_FLAG_SEND_FUA          (1 << 3)
#define NBD_FLAG_ROTATIONAL        (1 << 4)
#define NBD_FLAG_SEND_TRIM         (1 << 5)
#define NBD_FLAG_SEND_WRITE_ZEROES (1 << 6)
#define NBD_FLAG_SEND_DF           (1 << 7)
#define NBD_FLAG_CAN_MULTI_CONN    (1 << 8)
#define NBD_FLAG_SEND_CACHE        (1 << 10)
#define NBD_FLAG_SEND_FAST_ZERO    (1 << 11)

/* Options. */
#define NBD_OPT_EXPORT_NAME       1
#define NBD_OPT_ABORT             2
#define NBD_OPT_LIST              3
#define NBD_OPT_STARTTLS          5
#define NBD_OPT_INFO              6
#define NBD_OPT_GO                7
#define NBD_OPT_STRUCTURED_REPLY  8
#define NBD_OPT_LIST_META_CONTEXT 9
#define NBD_OPT_SET_META_CONTEXT  10

/* Option replies. */
#define NBD_REP_ACK              1
#define NBD_REP_SERVER           2
#define NBD_REP_INFO             3
#define NBD_REP_META_CONTEXT     4
#define NBD_REP_ERR_UNSUP        (0x80000000u + 1)
#define NBD_REP_ERR_POLICY       (0x80000000u + 2)
#define NBD_REP_ERR_INVALID      (0x80000000u + 3)
#define NBD_REP_ERR_UNKNOWN      (0x80000000u + 6)
#define NBD_REP_ERR_TLS_REQD     (0x80000000u + 5)
#define NBD_REP_ERR_SHUTDOWN     (0x80000000u + 7)
#define NBD_REP_ERR_BLOCK_SIZE_REQD (0x80000000u + 8)
#define NBD_REP_ERR_TOO_BIG      (0x80000000u + 9)

/* NBD_REP_INFO types. */
#define NBD_INFO_EXPORT      0
#define NBD_INFO_NAME        1
#define NBD_INFO_DESCRIPTION 2
#define NBD_INFO_BLOCK_SIZE  3

/* Commands. */
#define NBD_CMD_READ         0
#define NBD_CMD_WRITE        1
#define NBD_CMD_DISC         2
#define NBD_CMD_FLUSH        3
#define NBD_CMD_TRIM         4
#define NBD_CMD_CACHE        5
#define NBD_CMD_WRITE_ZEROES 6
#define NBD_CMD_BLOCK_STATUS 7
#define NBD_CMD_COUNT        8

/* Command flags. */
#define NBD_CMD_FLAG_FUA       (1 << 0)
#define NBD_CMD_FLAG_NO_HOLE   (1 << 1)
#define NBD_CMD_FLAG_DF        (1 << 2)
#define NBD_CMD_FLAG_REQ_ONE   (1 << 3)
#define NBD_CMD_FLAG_FAST_ZERO (1 << 4)

/* Structured replies. */
#define NBD_REPLY_FLAG_DONE          1
#define NBD_REPLY_TYPE_NONE          0
#define NBD_REPLY_TYPE_OFFSET_DATA   1
#define NBD_REPLY_TYPE_OFFSET_HOLE   2
#define NBD_REPLY_TYPE_BLOCK_STATUS  5
#define NBD_REPLY_TYPE_ERROR         ((1 << 15) + 1)

/* base:allocation flags. */
#define NBD_STATE_HOLE 1
#define NBD_STATE_ZERO 2

/* Error values on the wire. */
#define NBD_EPERM      1
#define NBD_EIO        5
#define NBD_ENOMEM     12
#define NBD_EINVAL     22
#define NBD_ENOSPC     28
#define NBD_EOVERFLOW  75
#define NBD_ENOTSUP    95
#define NBD_ESHUTDOWN  108

#endif
