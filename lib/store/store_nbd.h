/* SPDX-License-Identifier: BSD-3-Clause */
/* Upstream store: the data lives in another NBD server's export. */
#ifndef S4K_STORE_NBD_H
#define S4K_STORE_NBD_H

#include "sect4k/sect4k.h"
#include "store.h"

/* Connects c->upstream_connections handles to c->upstream (any URI libnbd
 * accepts) and checks the export against the geometry.  Sets *size to
 * the device size it serves: the export's, or c->geom.size if that is
 * given (it may not be larger). */
struct s4k_store *s4k_nbd_store_new (const struct s4k_config *c,
                                     uint64_t *size, char *err,
                                     size_t errlen);
/* Connections lost and made again since the store opened (for tests). */
uint64_t s4k_nbd_store_reconnects (const struct s4k_store *s);

#endif
