/* SPDX-License-Identifier: BSD-3-Clause */
/* The fault layer: a store over the device's store that keeps a volatile
 * write cache, bad physical sectors and power cuts (issue 11).  Only in
 * place when a fault key is given, so without them the data path is as
 * it was. */
#ifndef S4K_FAULT_H
#define S4K_FAULT_H

#include "sect4k/sect4k.h"
#include "store/store.h"

struct s4k_fault;

/* Wraps inner (closed on failure too); *fault is the layer, owned by the
 * returned store. */
struct s4k_store *fault_wrap (struct s4k_store *inner,
                              const struct s4k_config *c,
                              struct s4k_fault **fault,
                              char *err, size_t errlen);
/* After any fork: the control socket's thread. */
void fault_start (struct s4k_fault *f, struct s4k_dev *d);
/* Before the store closes: stops the thread. */
void fault_stop (struct s4k_fault *f);
/* The device's logical size changed (s4k_dev_set_logical). */
void fault_set_logical (struct s4k_fault *f, uint32_t logical);
/* zoned=: the device's zones, for power cuts (lib/fault/fault_zone.c). */
struct s4k_zones;
int fault_set_zones (struct s4k_fault *f, struct s4k_zones *z);
/* Makes the cached writes in [off, off+len) durable, and the zones'
 * write pointers: as written (CLOSE), or (pointer) where a zone
 * operation put them (FINISH, RESET). */
int fault_zone_sync (struct s4k_fault *f, uint64_t len, uint64_t off,
                     bool pointer);
/* The device's layer, or NULL (dev.c). */
struct s4k_fault *dev_fault (const struct s4k_dev *d);
/* True if the calling thread's request comes from a connection opened
 * before the latest power cut (s4k_fault_epoch): the layer refuses it. */
bool fault_stale (struct s4k_fault *f);

/* The control socket (lib/control.c). */
struct control;
/* Binds the socket now, so a bad path fails at start-up. */
struct control *control_open (const char *path, char *err, size_t errlen);
/* Serves it on a thread (after any fork). */
void control_start (struct control *c, struct s4k_dev *d);
void control_close (struct control *c);

#endif
