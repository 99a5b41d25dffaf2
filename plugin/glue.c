/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared by the nbdkit plugin and filter (see glue.h). */
#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include <errno.h>
#include <inttypes.h>

#include <stdatomic.h>

#include "glue.h"

int
s4k_glue_result (struct s4k_dev *dev, atomic_bool *refused_once, int r,
                 enum s4k_op op, uint64_t len, uint64_t off)
{
  if (r == 0)
    return 0;
  if (r == -EINVAL && s4k_refused (dev, op, len, off)) {
    char msg[256];
    s4k_explain_refusal (dev, op, len, off, msg, sizeof msg);
    if (!atomic_exchange (refused_once, true)) {
      nbdkit_error ("%s; further refusals on this connection are logged "
                    "as debug messages only", msg);
    }
    else
      nbdkit_debug ("%s", msg);
  }
  else if (r != -ENOTSUP)
    nbdkit_error ("%s at offset %" PRIu64 " length %" PRIu64 ": %s",
                  s4k_op_names[op], off, len, s4k_strerror (-r));
  nbdkit_set_error (-r);
  return -1;
}

bool
s4k_glue_cut_off (struct s4k_dev *dev, unsigned epoch, atomic_bool *cut_logged)
{
  s4k_fault_epoch (epoch);
  if (epoch == s4k_dev_power_cuts (dev))
    return false;
  if (!atomic_exchange (cut_logged, true))
    nbdkit_error ("power cut: this connection was opened before it; every "
                  "request on it fails with EIO, reconnect");
  nbdkit_set_error (EIO);
  return true;
}

unsigned
s4k_glue_flags (uint32_t flags)
{
  return (flags & NBDKIT_FLAG_FUA ? S4K_FUA : 0) |
         (flags & NBDKIT_FLAG_MAY_TRIM ? S4K_MAY_TRIM : 0) |
         (flags & NBDKIT_FLAG_FAST_ZERO ? S4K_FAST_ZERO : 0);
}

int
s4k_glue_add_extent (void *opaque, uint64_t off, uint64_t len, bool zero)
{
  struct s4k_glue_extents *c = opaque;
  if (nbdkit_add_extent (c->extents, off, len,
                         zero ? NBDKIT_EXTENT_HOLE | NBDKIT_EXTENT_ZERO : 0)
      == -1)
    return -errno ? -errno : -EIO;
  return c->req_one;
}
