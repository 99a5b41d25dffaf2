/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server --ublk: each export as a ublk block device
 * (drivers/block/ublk_drv.c, Documentation/block/ublk.rst).
 *
 * /dev/ublk-control takes the device's life cycle as io_uring commands
 * (ADD_DEV, SET_PARAMS, START_DEV, STOP_DEV, DEL_DEV) on a ring of
 * 128-byte SQEs.  Each of the device's queues is a thread with an
 * io_uring of its own, which is also the engine's event loop for that
 * queue (struct s4k_loop): it hands every tag's buffer to the kernel with
 * FETCH_REQ on /dev/ublkcN; a request arrives as that command's
 * completion, its description in the descriptors the kernel maps; it
 * runs through the engine's asynchronous device calls (s4k_aio_..., the
 * same path as the NBD loops: RMW, faults, statistics, write log), waits
 * for the timing model's completion on a ring timeout as sched.c does,
 * and COMMIT_AND_FETCH_REQ returns its result and takes the next.
 *
 * Our devices carry a mark and the server's pid in dev_info.ublksrv_flags
 * (kept by the kernel, read back by GET_DEV_INFO): a later start deletes
 * those whose server no longer runs (SIGKILL), and nothing else. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/blkzoned.h>
#include <linux/ublk_cmd.h>

#include "sect4k/scsi.h"
#include "sect4k/zone.h"
#include "ublk.h"

void log_msg (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

/* Debian 12's headers are Linux 6.1's.  Newer kernels take the commands
 * encoded as ioctl numbers (6.1 only the plain ones; 6.12 both unless
 * built without CONFIG_BLKDEV_UBLK_LEGACY_OPCODES): the encoded ones
 * first, the plain ones if the kernel does not know them. */
#ifndef UBLK_U_CMD_ADD_DEV
#define UBLK_U_CMD_GET_DEV_INFO \
  _IOR ('u', UBLK_CMD_GET_DEV_INFO, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_ADD_DEV \
  _IOWR ('u', UBLK_CMD_ADD_DEV, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_DEL_DEV \
  _IOWR ('u', UBLK_CMD_DEL_DEV, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_START_DEV \
  _IOWR ('u', UBLK_CMD_START_DEV, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_STOP_DEV \
  _IOWR ('u', UBLK_CMD_STOP_DEV, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_SET_PARAMS \
  _IOWR ('u', UBLK_CMD_SET_PARAMS, struct ublksrv_ctrl_cmd)
#define UBLK_U_IO_FETCH_REQ \
  _IOWR ('u', UBLK_IO_FETCH_REQ, struct ublksrv_io_cmd)
#define UBLK_U_IO_COMMIT_AND_FETCH_REQ \
  _IOWR ('u', UBLK_IO_COMMIT_AND_FETCH_REQ, struct ublksrv_io_cmd)
#define UBLK_U_CMD_GET_PARAMS \
  _IOR ('u', UBLK_CMD_GET_PARAMS, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_START_USER_RECOVERY \
  _IOWR ('u', UBLK_CMD_START_USER_RECOVERY, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_END_USER_RECOVERY \
  _IOWR ('u', UBLK_CMD_END_USER_RECOVERY, struct ublksrv_ctrl_cmd)
#endif

/* Zoned devices (Linux 6.6, include/uapi/linux/ublk_cmd.h; 6.1's header
 * has none of it): UBLK_F_ZONED needs UBLK_F_USER_COPY (the data of
 * each request is read and written with pread/pwrite on /dev/ublkcN at
 * USER_COPY_POS, the commit's addr then carrying a zone append's LBA),
 * the zone size in basic.chunk_sectors, the limits in a zoned
 * parameter block after devt. */
#ifndef UBLK_F_USER_COPY
#define UBLK_F_USER_COPY (1ULL << 7)
#endif
#ifndef UBLK_F_ZONED
#define UBLK_F_ZONED (1ULL << 8)
#endif
#ifndef UBLK_IO_OP_ZONE_OPEN
#define UBLK_IO_OP_ZONE_OPEN 10
#define UBLK_IO_OP_ZONE_CLOSE 11
#define UBLK_IO_OP_ZONE_FINISH 12
#define UBLK_IO_OP_ZONE_APPEND 13
#define UBLK_IO_OP_ZONE_RESET_ALL 14
#define UBLK_IO_OP_ZONE_RESET 15
#define UBLK_IO_OP_REPORT_ZONES 18   /* nr_sectors is the zones asked */
#endif
#define PARAM_TYPE_ZONED (1 << 3)
/* pread/pwrite offset of tag t's request data on queue q: the I/O area,
 * the queue at bit 41, the tag at bit 25. */
#define USER_COPY_POS(q, t) \
  (0x80000000ull + ((uint64_t) (q) << 41) + ((uint64_t) (t) << 25))

/* struct ublk_params as 6.6 lays it out: 6.1's stops after discard.
 * len covers what the types say (an older kernel takes its own part). */
struct uparams {
  uint32_t len, types;
  struct ublk_param_basic basic;
  struct ublk_param_discard discard;
  struct { uint32_t char_major, char_minor, disk_major, disk_minor; } devt;
  struct {
    uint32_t max_open_zones, max_active_zones, max_zone_append_sectors;
    uint8_t reserved[20];
  } zoned;
};

#define CONTROL "/dev/ublk-control"
/* dev_info.ublksrv_flags of our devices: "S4K", the export's index and
 * the pid of the server that added it (the kernel sets ublksrv_pid to -1
 * once its server died). */
#define MARK 0x53344bu
#define FLAGS(idx, pid) \
  ((uint64_t) MARK << 40 | (uint64_t) ((idx) & 0xff) << 32 | (uint32_t) (pid))
#define MARK_OF(flags) ((uint32_t) ((flags) >> 40))
#define IDX_OF(flags) ((unsigned) ((flags) >> 32) & 0xff)
#define PID_OF(flags) ((pid_t) ((flags) & 0x7fffffff))
/* Seconds START_USER_RECOVERY is retried while the dead server's files
 * are still being released (-EBUSY). */
#define RECOVERY_WAIT_S 10
/* Requests in flight per queue (tags): each holds a buffer of
 * max-request bytes, reserved lazily. */
#define QUEUE_DEPTH 64
/* The descriptors of queue q start at q times the largest queue's. */
#define DESC_AREA(depth) \
  (((depth) * sizeof (struct ublksrv_io_desc) + 4095) & ~(size_t) 4095)

struct uqueue;

/* One tag: a request slot of a queue. */
struct utag {
  struct uqueue *q;
  unsigned tag;
  void *buf;
  struct s4k_aio *aio;
  struct s4k_completion cmd;    /* FETCH / COMMIT_AND_FETCH completed */
  struct s4k_completion timer;  /* the timing model's completion */
  struct __kernel_timespec due;
  enum s4k_op op;
  uint64_t len, off, client_tag;
  uint64_t append_lba;          /* a zone append's first 512-byte sector */
  uint8_t uop;                  /* UBLK_IO_OP_... */
  int result;
  bool live;                    /* a command of ours holds the tag */
};

struct udisk;

struct uqueue {
  struct udisk *d;
  unsigned id;
  pthread_t thread;
  bool started;
  struct io_uring ring;
  struct s4k_loop loop;
  _Atomic (struct s4k_completion *) posted;
  int wake_fd;
  uint64_t wake_value;
  struct s4k_completion wake_op;
  atomic_bool stop;
  const struct ublksrv_io_desc *desc;
  size_t desc_len;
  struct utag tags[QUEUE_DEPTH];
  unsigned live;                /* tags with a command in the kernel */
  unsigned busy;                /* tags in the engine or the timing wait */
  struct s4k_client client;
  int init_error;
  bool ready;
};

struct udisk {
  struct ublk_front *f;
  struct s4k_export *x;
  struct s4k_dev *dev;
  bool timed, verbose;
  struct s4k_zones *zones;      /* zoned=host-managed (user copy), or NULL */
  unsigned sshift;              /* logical block = 512-byte sectors << it */
  int32_t id;                   /* -1 until added */
  int32_t recover;              /* a held device of ours to take over, or -1 */
  unsigned idx;                 /* the export's index */
  bool started;
  int cdev;
  uint32_t max_io;
  unsigned nq;
  struct uqueue *q;
  char name[32];                /* "ublkb0" */
};

struct ublk_front {
  struct io_uring ctrl;
  bool ctrl_ok;
  int control_fd;
  bool legacy;                  /* the kernel takes the plain opcodes only */
  bool recovery;                /* --ublk-recovery */
  size_t n;
  struct udisk *v;
};

static pthread_mutex_t ready_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cond = PTHREAD_COND_INITIALIZER;
static _Thread_local struct uqueue *current_queue;

/* ---- /dev/ublk-control --------------------------------------------------- */

/* Plain opcode of an encoded one (6.1 knows only those). */
static unsigned
opcode (const struct ublk_front *f, unsigned op)
{
  return f->legacy ? _IOC_NR (op) : op;
}

/* One control command, waited for: its result (0 or -errno). */
static int
ctrl_cmd (struct ublk_front *f, unsigned op, uint32_t dev_id, void *addr,
          uint16_t len, uint64_t data0)
{
  struct io_uring_sqe *sqe = io_uring_get_sqe (&f->ctrl);
  struct io_uring_cqe *cqe;
  if (!sqe)
    return -EBUSY;
  memset (sqe, 0, 2 * sizeof *sqe);   /* SQE128 */
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = f->control_fd;
  sqe->cmd_op = opcode (f, op);
  struct ublksrv_ctrl_cmd *c = (struct ublksrv_ctrl_cmd *) sqe->cmd;
  c->dev_id = dev_id;
  c->queue_id = (uint16_t) -1;
  c->addr = (uintptr_t) addr;
  c->len = len;
  c->data[0] = data0;
  int r = io_uring_submit (&f->ctrl);
  if (r < 0)
    return r;
  do
    r = io_uring_wait_cqe (&f->ctrl, &cqe);
  while (r == -EINTR);
  if (r < 0)
    return r;
  r = cqe->res;
  io_uring_cqe_seen (&f->ctrl, cqe);
  if (r == -EOPNOTSUPP && !f->legacy) {
    f->legacy = true;           /* Linux before 6.3: the plain opcodes */
    return ctrl_cmd (f, op, dev_id, addr, len, data0);
  }
  return r;
}

int
ublk_check (char *err, size_t errlen)
{
  struct stat st;
  if (stat (CONTROL, &st) == -1) {
    snprintf (err, errlen, "--ublk: no " CONTROL ": the ublk driver is not "
              "loaded (modprobe ublk_drv, as root; Linux 6.0 or later)");
    return -1;
  }
  if (geteuid () != 0) {
    snprintf (err, errlen, "--ublk: needs root (it adds block devices "
              "through " CONTROL ")");
    return -1;
  }
  return 0;
}

int
ublk_refused_keys (const struct s4k_export *x, bool named, bool recovery,
                   char *err, size_t errlen)
{
  const char *pre = named ? "export=" : "", *nm = named ? x->name : "",
             *sep = named ? ": " : "";
  if (x->cfg.zone.model == S4K_ZONED_HOST_AWARE)
    snprintf (err, errlen, "--ublk: %s%s%szoned=host-aware: a ublk device "
              "is host-managed or not zoned (Linux has no host-aware ublk): "
              "use --scsi", pre, nm, sep);
  /* The kernel resends what was in flight at the death: a write or an
   * append the zones had already taken would fail or land twice. */
  else if (x->cfg.zone.model != S4K_ZONED_NONE && recovery)
    snprintf (err, errlen, "--ublk-recovery: %s%s%szoned=: the requests "
              "resent after a restart would meet write pointers already "
              "moved (a write fails, an append lands twice)", pre, nm, sep);
  else
    return 0;
  return -1;
}

int
ublk_refused (const struct s4k_export *x, bool named, char *err,
              size_t errlen)
{
  char who[S4K_EXPORT_NAME_MAX + 16] = "";
  const struct s4k_geometry *g = s4k_dev_geometry (x->dev);
  if (named)
    snprintf (who, sizeof who, "export=%s: ", x->name);
  struct s4k_zones_info zi = { 0 };
  if (s4k_dev_zones (x->dev))
    s4k_zones_info (s4k_dev_zones (x->dev), &zi);
  if (zi.model && zi.capacity % zi.zone_lbas)
    snprintf (err, errlen, "--ublk: %szoned=: size= is not a multiple of "
              "zone-size=: ublk counts whole zones (the smaller last one "
              "would be lost): use --scsi", who);
  else if (g->alignment)
    snprintf (err, errlen, "--ublk: %salignment offset %" PRIu32 ": ublk's "
              "parameters have no alignment offset (the disk would say 0): "
              "use --scsi", who, g->alignment);
  else if (g->logical > 4096)
    snprintf (err, errlen, "--ublk: %slogical %" PRIu32 ": ublk takes "
              "logical sizes up to the page size (4096): use --scsi",
              who, g->logical);
  else if (s4k_dev_max_request (x->dev) < 4096)
    snprintf (err, errlen, "--ublk: %smax-request=%" PRIu32 ": ublk takes "
              "at least 4096", who, s4k_dev_max_request (x->dev));
  else {
    if (s4k_dev_atomic (x->dev)->max)
      log_msg ("--ublk: %sthe atomic write limits are not shown to the "
               "kernel (ublk has no parameters for them): the disk's writes "
               "may tear as any; use --scsi for untorn writes", who);
    return 0;
  }
  return -1;
}

/* ---- a queue's event loop ------------------------------------------------ */

static void
arm_wake (struct uqueue *q)
{
  struct io_uring_sqe *sqe = s4k_ring_sqe (&q->ring);
  io_uring_prep_read (sqe, q->wake_fd, &q->wake_value, sizeof q->wake_value,
                      0);
  io_uring_sqe_set_data (sqe, &q->wake_op);
}

static void
on_wake (struct s4k_completion *c, int res)
{
  (void) res;
  arm_wake (s4k_container_of (c, struct uqueue, wake_op));
}

/* s4k_loop.post, as loop.c's: a lock-free stack and the eventfd. */
static void
post (struct s4k_loop *loop, struct s4k_completion *c)
{
  struct uqueue *q = s4k_container_of (loop, struct uqueue, loop);
  c->next = atomic_load_explicit (&q->posted, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit (&q->posted, &c->next, c,
                                                 memory_order_release,
                                                 memory_order_relaxed))
    ;
  uint64_t one = 1;
  if (current_queue != q && write (q->wake_fd, &one, sizeof one) != sizeof one)
    log_msg ("eventfd write: %s", s4k_strerror (errno));
}

/* FETCH_REQ (result unused) or COMMIT_AND_FETCH_REQ with result. */
static void
io_cmd (struct utag *t, unsigned op, int result)
{
  struct uqueue *q = t->q;
  struct io_uring_sqe *sqe = s4k_ring_sqe (&q->ring);
  memset (sqe, 0, sizeof *sqe);
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = q->d->cdev;
  sqe->cmd_op = opcode (q->d->f, op);
  /* The command fits in a 64-byte SQE's last 16 bytes. */
  struct ublksrv_io_cmd *c = (struct ublksrv_io_cmd *) sqe->cmd;
  c->q_id = q->id;
  c->tag = t->tag;
  c->result = result;
  /* User copy: no buffer; a committed zone append says where it went. */
  if (!q->d->zones)
    c->addr = (uintptr_t) t->buf;
  else if (op == UBLK_U_IO_COMMIT_AND_FETCH_REQ &&
           t->uop == UBLK_IO_OP_ZONE_APPEND)
    c->addr = t->append_lba;
  io_uring_sqe_set_data (sqe, &t->cmd);
}

/* What the kernel expects of a zone error (null_blk's): the open and
 * active limits as BLK_STS_ZONE_OPEN_RESOURCE and _ACTIVE_RESOURCE
 * (errno_to_blk_status), anything else EIO. */
static int
zone_errno (struct udisk *d, int r)
{
  const int zerr = s4k_zone_err_of (r);
  if (!zerr)
    return r;
  if (zerr != S4K_ZERR_INSUFFICIENT_RESOURCES)
    return -EIO;
  struct s4k_zones_info zi;
  struct s4k_zones_counts zc;
  s4k_zones_info (d->zones, &zi);
  s4k_zones_counts (d->zones, &zc);
  return zi.max_active &&
         zc.imp_open + zc.exp_open + zc.closed >= zi.max_active
         ? -EOVERFLOW : -ETOOMANYREFS;
}

/* REPORT ZONES into the request: struct blk_zone in 512-byte sectors,
 * as sd_zbc_parse_report makes them of the SCSI report (a conventional
 * zone's pointer at its end, the capacity its length).  The bytes. */
static int
report_zones (struct utag *t, uint64_t sector, uint32_t nr)
{
  struct udisk *d = t->q->d;
  struct blk_zone *bz = t->buf;
  const uint32_t room = d->max_io / sizeof *bz;
  uint64_t listed;
  if (nr > room)
    nr = room;
  struct s4k_zone_desc *z = calloc (nr ? nr : 1, sizeof *z);
  if (!z)
    return -ENOMEM;
  int n = s4k_zones_report (d->zones, sector >> d->sshift, 0, true, z, nr,
                            &listed);
  if (n < 0) {
    free (z);
    return zone_errno (d, s4k_zone_errno (-n));
  }
  memset (bz, 0, (size_t) nr * sizeof *bz);
  for (int i = 0; i < n; i++) {
    const uint64_t end = z[i].start + z[i].len;
    bz[i] = (struct blk_zone) {
      .start = z[i].start << d->sshift, .len = z[i].len << d->sshift,
      .capacity = z[i].len << d->sshift,
      .wp = (z[i].wp == UINT64_MAX ? end : z[i].wp) << d->sshift,
      .type = z[i].type, .cond = z[i].cond, .non_seq = z[i].non_seq,
      .reset = z[i].reset_recommended,
    };
  }
  free (z);
  /* Fewer than asked: the kernel stops at a zone of length 0. */
  const size_t bytes = (size_t) (n < (int) nr ? n + 1 : n) * sizeof *bz;
  ssize_t w = pwrite (d->cdev, bz, bytes, USER_COPY_POS (t->q->id, t->tag));
  return w < 0 ? -errno : (int) w;
}

static void
commit (struct utag *t, int r)
{
  struct udisk *d = t->q->d;
  t->q->busy--;
  if (r == 0 && (t->op == S4K_OP_READ || t->op == S4K_OP_WRITE))
    r = t->len;                 /* the bytes done */
  /* User copy: a read's data into the request. */
  if (d->zones && r > 0 && t->uop == UBLK_IO_OP_READ &&
      pwrite (d->cdev, t->buf, t->len, USER_COPY_POS (t->q->id, t->tag))
      != (ssize_t) t->len)
    r = -EIO;
  if (d->zones && r < 0)
    r = zone_errno (d, r);
  io_cmd (t, UBLK_U_IO_COMMIT_AND_FETCH_REQ, r);
}

/* The zone operations and report of a zoned disk: synchronous, as the
 * SCSI front end runs ZBC OUT (s4k_dev_zone_op: the write log, the zone
 * records of file=, a reset's data discarded), not timed.  False if op
 * is not one. */
static bool
zone_request (struct utag *t, unsigned op, uint64_t sector, uint32_t nr)
{
  struct udisk *d = t->q->d;
  enum s4k_zone_op zop;
  switch (op) {
  case UBLK_IO_OP_REPORT_ZONES:
    t->q->busy++;
    commit (t, report_zones (t, sector, nr));
    return true;
  case UBLK_IO_OP_ZONE_OPEN: zop = S4K_ZOP_OPEN; break;
  case UBLK_IO_OP_ZONE_CLOSE: zop = S4K_ZOP_CLOSE; break;
  case UBLK_IO_OP_ZONE_FINISH: zop = S4K_ZOP_FINISH; break;
  case UBLK_IO_OP_ZONE_RESET: case UBLK_IO_OP_ZONE_RESET_ALL:
    zop = S4K_ZOP_RESET;
    break;
  default:
    return false;
  }
  t->q->busy++;
  s4k_fault_epoch (s4k_dev_power_cuts (d->dev));
  int r = s4k_dev_zone_op (d->dev, zop, sector >> d->sshift,
                           op == UBLK_IO_OP_ZONE_RESET_ALL);
  if (r < 0 && d->verbose)
    log_msg ("%s: zone operation %u at sector %" PRIu64 ": %s", d->name, op,
             sector, s4k_zone_err_of (r)
             ? s4k_zone_strerror (s4k_zone_err_of (r)) : s4k_strerror (-r));
  commit (t, r);
  return true;
}

static void
on_timer (struct s4k_completion *c, int res)
{
  (void) res;                   /* -ETIME */
  struct utag *t = s4k_container_of (c, struct utag, timer);
  commit (t, t->result);
}

/* The engine's result r for tag t. */
static void
engine_done (struct utag *t, int r)
{
  struct udisk *d = t->q->d;
  r = s4k_client_end (d->dev, &t->q->client, t->op, t->client_tag, r);
  if (r < 0 && d->verbose)
    log_msg ("%s: %s of %" PRIu64 " bytes at %" PRIu64 ": %s", d->name,
             s4k_op_names[t->op], t->len, t->off, s4k_strerror (-r));
  /* The timing model: the kernel hears of it when the modelled drive
   * would have finished; the loop serves the other tags meanwhile. */
  uint64_t due = d->timed ? s4k_dev_timing (d->dev, t->op, t->len, t->off, r)
                          : 0;
  if (due) {
    t->result = r;
    t->due.tv_sec = due / 1000000000u;
    t->due.tv_nsec = due % 1000000000u;
    s4k_loop_timeout (&t->q->loop, &t->timer, &t->due);
    return;
  }
  commit (t, r);
}

static void
aio_done (void *opaque, int r)
{
  engine_done (opaque, r);
}

/* A request arrived in tag t: into the engine. */
static void
start_request (struct utag *t)
{
  struct uqueue *q = t->q;
  struct udisk *d = q->d;
  const struct ublksrv_io_desc *iod = &q->desc[t->tag];
  const uint32_t op_flags = __atomic_load_n (&iod->op_flags,
                                             __ATOMIC_ACQUIRE);
  const unsigned op = op_flags & 0xff, fl = op_flags >> 8;
  unsigned flags = fl & UBLK_IO_F_FUA ? S4K_FUA : 0;
  int r;
  t->len = (uint64_t) iod->nr_sectors << 9;
  t->off = iod->start_sector << 9;
  t->uop = op;
  if (d->zones && zone_request (t, op, iod->start_sector, iod->nr_sectors))
    return;
  switch (op) {
  case UBLK_IO_OP_READ: t->op = S4K_OP_READ; break;
  case UBLK_IO_OP_WRITE: t->op = S4K_OP_WRITE; break;
  case UBLK_IO_OP_ZONE_APPEND:
    if (!d->zones)
      goto unsupported;
    t->op = S4K_OP_WRITE;
    break;
  case UBLK_IO_OP_FLUSH: t->op = S4K_OP_FLUSH; break;
  case UBLK_IO_OP_DISCARD: t->op = S4K_OP_TRIM; break;
  case UBLK_IO_OP_WRITE_ZEROES:
    t->op = S4K_OP_ZERO;
    if (!(fl & UBLK_IO_F_NOUNMAP))
      flags |= S4K_MAY_TRIM;
    break;
  default:
  unsupported:
    q->busy++;
    commit (t, -EOPNOTSUPP);
    return;
  }
  if (t->len > d->max_io && (t->op == S4K_OP_READ ||
                             t->op == S4K_OP_WRITE)) {
    q->busy++;
    commit (t, -EINVAL);        /* not from a kernel that read our limits */
    return;
  }
  /* User copy: a write's data from the request. */
  if (d->zones && t->op == S4K_OP_WRITE &&
      pread (d->cdev, t->buf, t->len, USER_COPY_POS (q->id, t->tag))
      != (ssize_t) t->len) {
    q->busy++;
    commit (t, -EIO);
    return;
  }
  q->busy++;
  /* A power cut fails what was in flight at its time, not what follows:
   * the disk stays, as the SCSI one does. */
  s4k_fault_epoch (s4k_dev_power_cuts (d->dev));
  t->client_tag = s4k_client_begin (d->dev, &q->client, t->op, flags);
  switch (t->op) {
  case S4K_OP_READ: r = s4k_aio_read (t->aio, t->buf, t->len, t->off); break;
  case S4K_OP_WRITE:
    if (op == UBLK_IO_OP_ZONE_APPEND) {
      /* The zones place it (at admission, before this returns). */
      r = s4k_aio_zone_append (t->aio, t->buf, t->len, &t->off, flags);
      t->append_lba = t->off >> 9;
      break;
    }
    r = s4k_aio_write (t->aio, t->buf, t->len, t->off, flags);
    break;
  case S4K_OP_ZERO: r = s4k_aio_zero (t->aio, t->len, t->off, flags); break;
  case S4K_OP_TRIM: r = s4k_aio_trim (t->aio, t->len, t->off, 0); break;
  default: r = s4k_aio_flush (t->aio); break;
  }
  if (r != 1)
    engine_done (t, r);
}

static void
on_cmd (struct s4k_completion *c, int res)
{
  struct utag *t = s4k_container_of (c, struct utag, cmd);
  if (res == UBLK_IO_RES_OK) {
    start_request (t);
    return;
  }
  /* UBLK_IO_RES_ABORT: the device is stopping; anything else is ours. */
  if (res != UBLK_IO_RES_ABORT && res != UBLK_IO_RES_OK)
    log_msg ("%s: queue %u tag %u: %s", t->q->d->name, t->q->id, t->tag,
             s4k_strerror (-res));
  t->live = false;
  t->q->live--;
}

static void
signal_ready (struct uqueue *q, int err)
{
  pthread_mutex_lock (&ready_lock);
  q->init_error = err;
  q->ready = true;
  pthread_cond_broadcast (&ready_cond);
  pthread_mutex_unlock (&ready_lock);
}

static void *
queue_main (void *opaque)
{
  struct uqueue *q = opaque;
  /* The kernel binds the queue to the task that fetched: this one. */
  int r = s4k_ring_init (&q->ring, 4 * QUEUE_DEPTH);
  if (r < 0) {
    signal_ready (q, r);
    return NULL;
  }
  current_queue = q;
  arm_wake (q);
  for (unsigned i = 0; i < QUEUE_DEPTH; i++) {
    io_cmd (&q->tags[i], UBLK_U_IO_FETCH_REQ, -1);
    q->tags[i].live = true;
  }
  q->live = QUEUE_DEPTH;
  r = io_uring_submit (&q->ring);
  signal_ready (q, r < 0 ? r : 0);
  if (r < 0) {
    io_uring_queue_exit (&q->ring);
    return NULL;
  }
  /* Until asked to stop (after STOP_DEV, with nothing in flight), or the
   * kernel gave back every tag. */
  while (!(atomic_load (&q->stop) && q->busy == 0) && q->live + q->busy) {
    struct s4k_completion *c;
    r = io_uring_submit_and_wait (&q->ring, 1);
    if (r < 0 && r != -EINTR && r != -ETIME) {
      log_msg ("%s: queue %u: io_uring: %s", q->d->name, q->id,
               s4k_strerror (-r));
      abort ();
    }
    s4k_loop_reap (&q->ring);
    while ((c = atomic_exchange_explicit (&q->posted, NULL,
                                          memory_order_acquire)))
      s4k_loop_run_posted (c);
  }
  if (q->live && !atomic_load (&q->stop))
    log_msg ("%s: queue %u stopped by the kernel", q->d->name, q->id);
  /* Nothing of its own in flight: the device lets go of the loop before
   * it goes (the upstream store flushes and closes its connection, and
   * the other queues and the NBD loops no longer ask it anything). */
  s4k_dev_loop_gone (q->d->dev, &q->loop);
  /* Closing the ring cancels the fetches still held. */
  io_uring_queue_exit (&q->ring);
  return NULL;
}

/* ---- devices ------------------------------------------------------------- */

static bool
pid_dead (long pid)
{
  return pid > 0 && pid != getpid () && kill (pid, 0) == -1 &&
         errno == ESRCH;
}

static void fill_params (struct udisk *d, bool readonly,
                         struct uparams *p);

/* A held device (of a dead server with user recovery) that export d can
 * take over: the same queue depth and parameters.  NULL or why not. */
static const char *
recoverable (struct udisk *d, uint32_t id,
             const struct ublksrv_ctrl_dev_info *info)
{
  struct uparams mine, its = { .len = sizeof its };
  if (!(info->flags & UBLK_F_USER_RECOVERY))
    return "it was added without --ublk-recovery";
  if (info->state != UBLK_S_DEV_QUIESCED)
    return "it holds no I/O (not quiesced)";
  if (info->queue_depth != QUEUE_DEPTH)
    return "another queue depth";
  if (ctrl_cmd (d->f, UBLK_U_CMD_GET_PARAMS, id, &its, sizeof its, 0) < 0)
    return "GET_PARAMS failed";
  fill_params (d, false, &mine);
  if (its.basic.logical_bs_shift != mine.basic.logical_bs_shift ||
      its.basic.physical_bs_shift != mine.basic.physical_bs_shift ||
      its.basic.dev_sectors != mine.basic.dev_sectors ||
      its.basic.max_sectors > info->max_io_buf_bytes >> 9)
    return "the export's geometry differs";
  return NULL;
}

/* The devices of ours whose server has died: with --ublk-recovery, one
 * held for export i (its I/O waiting) is taken over by it; the others
 * are deleted. */
static void
scan_dead (struct ublk_front *f, bool verbose)
{
  DIR *dir = opendir ("/sys/class/ublk-char");
  struct dirent *de;
  if (!dir)
    return;
  while ((de = readdir (dir))) {
    unsigned id;
    struct ublksrv_ctrl_dev_info info = { 0 };
    if (sscanf (de->d_name, "ublkc%u", &id) != 1)
      continue;
    int r = ctrl_cmd (f, UBLK_U_CMD_GET_DEV_INFO, id, &info, sizeof info, 0);
    const pid_t pid = PID_OF (info.ublksrv_flags);
    /* A server that took the device over runs as ublksrv_pid. */
    if (r < 0 || MARK_OF (info.ublksrv_flags) != MARK || !pid_dead (pid) ||
        (info.ublksrv_pid > 0 && !pid_dead (info.ublksrv_pid))) {
      if (verbose)
        log_msg ("--ublk: ublkb%u stays: %s", id, r < 0 ? s4k_strerror (-r)
                 : MARK_OF (info.ublksrv_flags) != MARK ? "not ours"
                 : "its server runs");
      continue;
    }
    const unsigned idx = IDX_OF (info.ublksrv_flags);
    if (f->recovery && idx < f->n && f->v[idx].recover < 0) {
      const char *why = recoverable (&f->v[idx], id, &info);
      if (!why) {
        f->v[idx].recover = id;
        continue;
      }
      log_msg ("--ublk: ublkb%u of the dead server %d is not taken over: %s",
               id, (int) pid, why);
    }
    ctrl_cmd (f, UBLK_U_CMD_STOP_DEV, id, NULL, 0, 0);
    r = ctrl_cmd (f, UBLK_U_CMD_DEL_DEV, id, NULL, 0, 0);
    if (r < 0)
      log_msg ("--ublk: cannot delete ublkb%u of the dead server %d: %s", id,
               (int) pid, s4k_strerror (-r));
    else
      log_msg ("--ublk: deleted ublkb%u, left by sect4k-server pid %d",
               id, (int) pid);
  }
  closedir (dir);
}

static int
shift_of (uint64_t v)
{
  return 63 - __builtin_clzll (v);
}

/* The kernel's parameters from the export's keys and geometry. */
static void
fill_params (struct udisk *d, bool readonly, struct uparams *p)
{
  const struct s4k_geometry *g = s4k_dev_geometry (d->dev);
  struct s4k_scsi_params sp;
  /* What the SCSI disk says of write cache, rotation and trim: the same
   * keys, read once. */
  s4k_scsi_params_from_config (&sp, &d->x->cfg, g, d->max_io);
  memset (p, 0, sizeof *p);
  p->len = offsetof (struct uparams, devt);
  p->types = UBLK_PARAM_TYPE_BASIC;
  p->basic.logical_bs_shift = shift_of (g->logical);
  p->basic.physical_bs_shift = shift_of (g->physical);
  p->basic.io_min_shift = shift_of (g->physical);
  /* ublk cannot say "none" (io_opt is 1 << shift): the physical size,
   * unless an optimal transfer length is configured. */
  p->basic.io_opt_shift = sp.opt_transfer ? shift_of (sp.opt_transfer)
                                          : shift_of (g->physical);
  p->basic.max_sectors = d->max_io >> 9;
  p->basic.dev_sectors = g->size >> 9;
  if (sp.write_cache)
    p->basic.attrs |= UBLK_ATTR_VOLATILE_CACHE | UBLK_ATTR_FUA;
  if (sp.rotation_rate > 1)
    p->basic.attrs |= UBLK_ATTR_ROTATIONAL;
  if (readonly)
    p->basic.attrs |= UBLK_ATTR_READ_ONLY;
  else {
    /* Trim and zero as the NBD front end offers them, within the SCSI
     * disk's limits (UNMAP, WRITE SAME). */
    p->types |= UBLK_PARAM_TYPE_DISCARD;
    p->discard.discard_granularity = g->physical;
    p->discard.max_discard_sectors = S4K_SCSI_MAX_UNMAP_BYTES >> 9;
    p->discard.max_write_zeroes_sectors = S4K_SCSI_MAX_WRITE_SAME_BYTES >> 9;
    p->discard.max_discard_segments = 1;
  }
  if (d->zones) {
    /* Host-managed: the zone size, the limits (ublk has the active one,
     * which SCSI lacks), and zone append, which ublk requires (Linux
     * 6.12 refuses SET_PARAMS without it): up to a request. */
    struct s4k_zones_info zi;
    s4k_zones_info (d->zones, &zi);
    p->len = sizeof *p;
    p->types |= PARAM_TYPE_ZONED;
    p->basic.chunk_sectors = zi.zone_lbas << d->sshift;
    /* A limit of at least the sequential zones never binds: Linux's
     * block layer takes it as none (disk_update_zone_resources; null_blk
     * disables it so), and ublk refuses one above all the zones with a
     * bare EINVAL at SET_PARAMS.  So none, as the disk would show it. */
    const uint32_t seq = zi.nr_zones - zi.conventional;
    p->zoned.max_open_zones = zi.max_open < seq ? zi.max_open : 0;
    p->zoned.max_active_zones = zi.max_active < seq ? zi.max_active : 0;
    p->zoned.max_zone_append_sectors = d->max_io >> 9;
  }
}

static void
stop_queues (struct udisk *d)
{
  uint64_t one = 1;
  for (unsigned i = 0; i < d->nq; i++) {
    struct uqueue *q = &d->q[i];
    if (!q->started)
      continue;
    atomic_store (&q->stop, true);
    if (write (q->wake_fd, &one, sizeof one) != sizeof one)
      log_msg ("eventfd write: %s", s4k_strerror (errno));
  }
  for (unsigned i = 0; i < d->nq; i++) {
    struct uqueue *q = &d->q[i];
    if (q->started)
      pthread_join (q->thread, NULL);
    q->started = false;
  }
}

/* Undoes whatever of disk_start was done. */
static void
disk_remove (struct udisk *d)
{
  struct ublk_front *f = d->f;
  if (d->id >= 0 && d->started) {
    int r = ctrl_cmd (f, UBLK_U_CMD_STOP_DEV, d->id, NULL, 0, 0);
    if (r < 0)
      log_msg ("%s: STOP_DEV: %s", d->name, s4k_strerror (-r));
  }
  stop_queues (d);
  for (unsigned i = 0; d->q && i < d->nq; i++) {
    struct uqueue *q = &d->q[i];
    for (unsigned k = 0; k < QUEUE_DEPTH; k++) {
      s4k_aio_free (q->tags[k].aio);
      if (q->tags[k].buf)
        munmap (q->tags[k].buf, d->max_io);
    }
    if (q->desc)
      munmap ((void *) q->desc, q->desc_len);
    if (q->wake_fd != -1)
      close (q->wake_fd);
  }
  free (d->q);
  d->q = NULL;
  if (d->cdev != -1)
    close (d->cdev);
  d->cdev = -1;
  /* The kernel frees the device once the last reference to /dev/ublkcN
   * is gone (the queues' rings included). */
  if (d->id >= 0) {
    int r = ctrl_cmd (f, UBLK_U_CMD_DEL_DEV, d->id, NULL, 0, 0);
    if (r < 0)
      log_msg ("%s: DEL_DEV: %s", d->name, s4k_strerror (-r));
  }
  d->id = -1;
}

static int
disk_start (struct udisk *d, bool readonly, unsigned nq, char *err,
            size_t errlen)
{
  struct ublk_front *f = d->f;
  struct ublksrv_ctrl_dev_info info = {
    .nr_hw_queues = nq, .queue_depth = QUEUE_DEPTH,
    .max_io_buf_bytes = d->max_io, .dev_id = (uint32_t) -1,
    .ublksrv_pid = getpid (), .ublksrv_flags = FLAGS (d->idx, getpid ()),
    /* REISSUE: what was in flight at the death is sent again. */
    .flags = (f->recovery ? UBLK_F_USER_RECOVERY |
                            UBLK_F_USER_RECOVERY_REISSUE : 0) |
             (d->zones ? UBLK_F_ZONED | UBLK_F_USER_COPY : 0),
  };
  char path[64];
  int r;
  if (d->recover >= 0) {
    /* A held device: its parameters stay; the kernel waits until the
     * dead server's files are released. */
    d->id = d->recover;
    snprintf (d->name, sizeof d->name, "ublkb%" PRId32, d->id);
    if ((r = ctrl_cmd (f, UBLK_U_CMD_GET_DEV_INFO, d->id, &info, sizeof info,
                       0)) < 0) {
      snprintf (err, errlen, "--ublk: %s: GET_DEV_INFO: %s", d->name,
                s4k_strerror (-r));
      return -1;
    }
    nq = info.nr_hw_queues;
    d->max_io = info.max_io_buf_bytes & ~(uint32_t) 4095;
    for (int i = 0; i < RECOVERY_WAIT_S * 10; i++) {
      r = ctrl_cmd (f, UBLK_U_CMD_START_USER_RECOVERY, d->id, NULL, 0, 0);
      if (r != -EBUSY)
        break;
      usleep (100000);
    }
    if (r < 0) {
      snprintf (err, errlen, "--ublk: %s: START_USER_RECOVERY: %s", d->name,
                s4k_strerror (-r));
      d->started = true;        /* STOP_DEV then: the held I/O fails */
      return -1;
    }
    d->started = true;
  }
  else {
    static const char nozones[] = "--ublk: zoned=: this kernel's ublk has "
      "no zoned devices (UBLK_F_ZONED: Linux 6.6 or later, with "
      "CONFIG_BLK_DEV_ZONED): use --scsi";
    r = ctrl_cmd (f, UBLK_U_CMD_ADD_DEV, -1, &info, sizeof info, 0);
    if (r < 0) {
      /* 6.6 and later refuse UBLK_F_ZONED without CONFIG_BLK_DEV_ZONED. */
      if (r == -EINVAL && d->zones)
        snprintf (err, errlen, "%s", nozones);
      else
        snprintf (err, errlen, "--ublk: ADD_DEV: %s", s4k_strerror (-r));
      return -1;
    }
    d->id = info.dev_id;
    snprintf (d->name, sizeof d->name, "ublkb%" PRId32, d->id);
    /* Before 6.6 the kernel drops the flags it does not know. */
    if (d->zones && (info.flags & (UBLK_F_ZONED | UBLK_F_USER_COPY)) !=
                    (UBLK_F_ZONED | UBLK_F_USER_COPY)) {
      snprintf (err, errlen, "%s", nozones);
      return -1;
    }
    nq = info.nr_hw_queues;     /* the kernel gives at most one per CPU */
    if (f->recovery && !(info.flags & UBLK_F_USER_RECOVERY_REISSUE)) {
      snprintf (err, errlen, "--ublk-recovery: this kernel's ublk has no "
                "user recovery (Linux 6.0 or later)");
      return -1;
    }
    /* The kernel may round the buffer size down (to pages). */
    if (info.max_io_buf_bytes < d->max_io)
      d->max_io = info.max_io_buf_bytes & ~(uint32_t) 4095;
    struct uparams p;
    fill_params (d, readonly, &p);
    if ((r = ctrl_cmd (f, UBLK_U_CMD_SET_PARAMS, d->id, &p, sizeof p,
                       0)) < 0) {
      snprintf (err, errlen, "--ublk: %s: SET_PARAMS: %s", d->name,
                s4k_strerror (-r));
      return -1;
    }
  }
  snprintf (path, sizeof path, "/dev/ublkc%" PRId32, d->id);
  /* udev may make the node a moment after ADD_DEV. */
  for (int i = 0; i < 200 && (d->cdev = open (path, O_RDWR | O_CLOEXEC)) == -1
       && errno == ENOENT; i++)
    usleep (10000);
  if (d->cdev == -1) {
    snprintf (err, errlen, "--ublk: %s: %s", path, s4k_strerror (errno));
    return -1;
  }
  if (!(d->q = calloc (nq, sizeof *d->q))) {
    snprintf (err, errlen, "out of memory");
    return -1;
  }
  d->nq = nq;
  for (unsigned i = 0; i < nq; i++)
    d->q[i].wake_fd = -1;
  for (unsigned i = 0; i < nq; i++) {
    struct uqueue *q = &d->q[i];
    q->d = d;
    q->id = i;
    q->wake_op.fn = on_wake;
    q->loop = (struct s4k_loop) { &q->ring, post };
    q->desc_len = DESC_AREA (QUEUE_DEPTH);
    void *m = mmap (NULL, q->desc_len, PROT_READ, MAP_SHARED | MAP_POPULATE,
                    d->cdev, UBLKSRV_CMD_BUF_OFFSET +
                    (off_t) i * DESC_AREA (UBLK_MAX_QUEUE_DEPTH));
    if (m == MAP_FAILED) {
      snprintf (err, errlen, "--ublk: %s: mmap of queue %u: %s", path, i,
                s4k_strerror (errno));
      return -1;
    }
    q->desc = m;
    if ((q->wake_fd = eventfd (0, EFD_CLOEXEC)) == -1) {
      snprintf (err, errlen, "eventfd: %s", s4k_strerror (errno));
      return -1;
    }
    for (unsigned k = 0; k < QUEUE_DEPTH; k++) {
      struct utag *t = &q->tags[k];
      t->q = q;
      t->tag = k;
      t->cmd.fn = on_cmd;
      t->timer.fn = on_timer;
      /* Reserved lazily: memory only for what requests touch. */
      t->buf = mmap (NULL, d->max_io, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (t->buf == MAP_FAILED) {
        t->buf = NULL;
        snprintf (err, errlen, "--ublk: buffers: %s", s4k_strerror (errno));
        return -1;
      }
      if (!(t->aio = s4k_aio_new (d->dev, &q->loop, aio_done, t))) {
        snprintf (err, errlen, "out of memory");
        return -1;
      }
    }
  }
  for (unsigned i = 0; i < nq; i++) {
    struct uqueue *q = &d->q[i];
    int e = pthread_create (&q->thread, NULL, queue_main, q);
    if (e) {
      snprintf (err, errlen, "pthread_create: %s", s4k_strerror (e));
      return -1;
    }
    q->started = true;
  }
  pthread_mutex_lock (&ready_lock);
  for (unsigned i = 0; i < nq; i++)
    while (!d->q[i].ready)
      pthread_cond_wait (&ready_cond, &ready_lock);
  pthread_mutex_unlock (&ready_lock);
  for (unsigned i = 0; i < nq; i++)
    if (d->q[i].init_error < 0) {
      snprintf (err, errlen, "--ublk: %s: queue %u: io_uring: %s", d->name,
                i, s4k_strerror (-d->q[i].init_error));
      return -1;
    }
  /* Returns once every queue has fetched: the disk then exists (or,
   * recovered, serves again, the held requests first). */
  if (d->recover >= 0) {
    if ((r = ctrl_cmd (f, UBLK_U_CMD_END_USER_RECOVERY, d->id, NULL, 0,
                       getpid ())) < 0) {
      snprintf (err, errlen, "--ublk: %s: END_USER_RECOVERY: %s", d->name,
                s4k_strerror (-r));
      return -1;
    }
    log_msg ("--ublk: took over /dev/%s of a dead server, with the I/O it "
             "held", d->name);
    return 0;
  }
  if ((r = ctrl_cmd (f, UBLK_U_CMD_START_DEV, d->id, NULL, 0,
                     getpid ())) < 0) {
    snprintf (err, errlen, "--ublk: %s: START_DEV: %s", d->name,
              s4k_strerror (-r));
    return -1;
  }
  d->started = true;
  return 0;
}

/* ublk_drv asks for a zone report in requests of at most max_sectors
 * (64 bytes a zone), from where the last one stopped.  Linux 6.12 maps
 * at most 1024 pages into one (blk_rq_map_kern: bio_map_kern's
 * bio_kmalloc): a larger one fails with ENOMEM, and with it START_DEV,
 * which reports every zone (seen with 131072 zones under the default
 * 32M).  So with more zones than 4 MiB holds, requests of at most 4 MiB.
 * And it hands each request's zones to the caller numbered from 0 again
 * (ublk_report_zones' cb index): a BLKREPORTZONE asking more zones than
 * one request holds gets the last request's zones at the start of its
 * array.  blkzone asks 4096 at a time: said when fewer fit. */
#define REPORT_MAX (4u << 20)
#define BLKZONE_BATCH 4096u

static void
report_limits (struct udisk *d, bool named)
{
  struct s4k_zones_info zi;
  s4k_zones_info (d->zones, &zi);
  const char *pre = named ? "export=" : "", *nm = named ? d->x->name : "",
             *sep = named ? ": " : "";
  const uint64_t bytes = (uint64_t) zi.nr_zones * sizeof (struct blk_zone);
  if (bytes > REPORT_MAX && d->max_io > REPORT_MAX) {
    log_msg ("--ublk: %s%s%s%" PRIu32 " zones: requests of at most 4M, not "
             "max-request's %" PRIu32 "k (ublk_drv fails a zone report "
             "request above 4 MiB)", pre, nm, sep, zi.nr_zones,
             d->max_io >> 10);
    d->max_io = REPORT_MAX;
  }
  const uint32_t per = d->max_io / sizeof (struct blk_zone);
  if (zi.nr_zones > per && per < BLKZONE_BATCH)
    log_msg ("--ublk: %s%s%s%" PRIu32 " zones, %" PRIu32 " a report request "
             "(max-request=%" PRIu32 "k): ublk_drv misplaces the zones of "
             "a BLKREPORTZONE of more (blkzone asks %u): give max-request=%uk "
             "or more", pre, nm, sep, zi.nr_zones, per, d->max_io >> 10,
             BLKZONE_BATCH, BLKZONE_BATCH * 64 / 1024);
}

struct ublk_front *
ublk_start (struct s4k_exports *t, bool readonly, bool recovery,
            unsigned queues, bool verbose, FILE *out, char *err,
            size_t errlen)
{
  struct ublk_front *f = calloc (1, sizeof *f);
  if (!f || !(f->v = calloc (t->n, sizeof *f->v))) {
    free (f);
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  f->control_fd = open (CONTROL, O_RDWR | O_CLOEXEC);
  if (f->control_fd == -1) {
    snprintf (err, errlen, "--ublk: " CONTROL ": %s", s4k_strerror (errno));
    free (f->v);
    free (f);
    return NULL;
  }
  int r = io_uring_queue_init (4, &f->ctrl, IORING_SETUP_SQE128);
  if (r < 0) {
    snprintf (err, errlen, "--ublk: io_uring with 128-byte entries: %s",
              s4k_strerror (-r));
    close (f->control_fd);
    free (f->v);
    free (f);
    return NULL;
  }
  f->ctrl_ok = true;
  f->recovery = recovery;
  for (size_t i = 0; i < t->n; i++) {
    struct udisk *d = &f->v[i];
    d->f = f;
    d->x = &t->v[i];
    d->idx = i;
    d->dev = t->v[i].dev;
    d->id = d->recover = -1;
    d->cdev = -1;
    d->verbose = verbose;
    d->timed = s4k_dev_timed (d->dev);
    d->zones = s4k_dev_zones (d->dev);
    d->sshift = shift_of (s4k_dev_geometry (d->dev)->logical) - 9;
    /* Whole pages (ublk's buffers are), within max-request. */
    d->max_io = s4k_dev_max_request (d->dev) & ~(uint32_t) 4095;
    if (d->zones)
      report_limits (d, t->named);
  }
  f->n = t->n;
  scan_dead (f, verbose);
  for (size_t i = 0; i < t->n; i++) {
    struct udisk *d = &f->v[i];
    if (disk_start (d, readonly || s4k_dev_readonly (d->dev), queues, err,
                    errlen) == -1) {
      ublk_stop (f);
      return NULL;
    }
    if (out)
      fprintf (out, "/dev/%s %s\n", d->name, d->x->name[0] ? d->x->name
                                                            : "-");
    log_msg ("/dev/%s: export %s, %u queue%s of %u", d->name,
             t->named ? d->x->name : "(default)", d->nq,
             d->nq == 1 ? "" : "s", QUEUE_DEPTH);
  }
  if (out)
    fflush (out);
  return f;
}

const char *
ublk_front_disk (const struct ublk_front *f, size_t i)
{
  return f->v[i].name;
}

void
ublk_stop (struct ublk_front *f)
{
  if (!f)
    return;
  for (size_t i = f->n; i-- > 0;)
    disk_remove (&f->v[i]);
  if (f->ctrl_ok)
    io_uring_queue_exit (&f->ctrl);
  close (f->control_fd);
  free (f->v);
  free (f);
}
