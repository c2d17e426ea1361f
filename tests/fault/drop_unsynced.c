/*
 * drop_unsynced: an LD_PRELOAD shim that makes `kill -9` behave like a power loss for chosen
 * files, so tests can see a missing fsync.
 *
 * A plain kill -9 loses nothing that reached the page cache, so it cannot tell a program that
 * syncs from one that does not. Under this shim, bytes written to a file whose path (as passed
 * to open) starts with $FP_FAULT_PATH_PREFIX are kept in the process's memory and reach the file
 * only when the program calls fdatasync(2) or fsync(2) on that descriptor. The file on disk
 * therefore always holds exactly what was synced, and killing the process drops the rest, as a
 * power loss drops the page cache. Without FP_FAULT_PATH_PREFIX (or with it empty) every call
 * passes straight through.
 *
 * What is intercepted, for descriptors of matching files:
 *   open, open64, openat, openat64  start tracking (not with O_SYNC/O_DSYNC: those writes are
 *                                   durable at once, so they pass through)
 *   write, writev, pwrite, pwrite64 recorded in order, nothing written; the logical size and
 *                                   position follow (O_APPEND appends at the logical end)
 *   ftruncate, ftruncate64          recorded like a write
 *   lseek, lseek64                  moves the logical position
 *   fdatasync, fsync                apply the recorded operations in order, then really sync
 *   close                           drops what was never synced (it would not have survived)
 *   rename                          only the optional delay below
 * rename needs no bookkeeping: tracking is per descriptor and a file only ever holds its synced
 * bytes, so renaming a snapshot over the log puts exactly the snapshot's synced content under the
 * name, and what was written to it but not yet synced stays pending on its descriptor until a
 * later sync (or is lost with the process). Directory entries (creation, rename) are treated as
 * durable at once: the shim models lost file data, not lost directory updates.
 * With FP_FAULT_RENAME_DELAY_MS=N, a rename onto a matching path first sleeps N ms, so a test's
 * kill can land between a snapshot's sync and its rename (compaction's crash window).
 *
 * Not modelled (the proxy's state store does none of it): reading back unsynced data (read,
 * pread and fstat see the synced file), dup'ed descriptors, mmap, O_TRUNC of a tracked file,
 * sync(2)/syncfs(2)/sync_file_range(2). A descriptor number above the table aborts loudly.
 *
 * To simulate a program that never syncs, preload a library that turns fsync and fdatasync into
 * no-ops *before* this one (LD_PRELOAD="libeatmydata.so drop_unsynced.so"): the shim then never
 * sees a sync and applies nothing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_FDS 65536

struct op {  /* one recorded write (truncate == 0) or ftruncate (truncate == 1) */
  struct op *next;
  off_t offset;  /* where the bytes go, or the new length */
  size_t length;
  int truncate;
  char data[];
};

struct tracked {
  int append;     /* opened with O_APPEND */
  off_t position; /* the logical file position */
  off_t size;     /* the logical size: synced size plus what is pending */
  struct op *head, **tail;
};

static struct tracked *files[MAX_FDS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const char *prefix;
static size_t prefix_len;
static long rename_delay_ms;

static int (*real_open)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static int (*real_ftruncate)(int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_close)(int);
static int (*real_rename)(const char *, const char *);

__attribute__((constructor)) static void init(void) {
  if (real_close != NULL) return;
  real_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
  real_openat = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
  real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
  real_pwrite = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
  real_ftruncate = (int (*)(int, off_t))dlsym(RTLD_NEXT, "ftruncate");
  real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  real_rename = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
  real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
  const char *p = getenv("FP_FAULT_PATH_PREFIX");
  if (p != NULL && *p != '\0') {
    prefix = p;
    prefix_len = strlen(p);
  }
  const char *delay = getenv("FP_FAULT_RENAME_DELAY_MS");
  if (delay != NULL) rename_delay_ms = strtol(delay, NULL, 10);
}

static void die(const char *what, int fd) {
  char msg[160];
  int n = snprintf(msg, sizeof msg, "drop_unsynced: %s (fd %d); aborting\n", what, fd);
  if (n > 0) (void)real_write(2, msg, (size_t)n);
  abort();
}

static struct tracked *lookup(int fd) {  /* call with mu held */
  return fd >= 0 && fd < MAX_FDS ? files[fd] : NULL;
}

/* Lock-free fast path for untracked descriptors. Also resolves the real calls when another
 * library's constructor calls in before ours has run. */
static int any_tracked(int fd) {
  if (real_close == NULL) init();
  return prefix != NULL && fd >= 0 && fd < MAX_FDS && __atomic_load_n(&files[fd], __ATOMIC_ACQUIRE);
}

static void drop_ops(struct tracked *t) {
  struct op *o = t->head;
  while (o != NULL) {
    struct op *next = o->next;
    free(o);
    o = next;
  }
  t->head = NULL;
  t->tail = &t->head;
}

static void start_tracking(int fd, const char *path, int flags) {
  if (fd < 0 || prefix == NULL || strncmp(path, prefix, prefix_len) != 0) return;
  if (flags & (O_SYNC | O_DSYNC)) return;
  if (fd >= MAX_FDS) die("descriptor beyond the table", fd);
  struct stat st;
  if (fstat(fd, &st) != 0) die("fstat failed", fd);
  struct tracked *t = calloc(1, sizeof *t);
  if (t == NULL) die("out of memory", fd);
  t->append = (flags & O_APPEND) != 0;
  t->size = st.st_size;
  t->tail = &t->head;
  pthread_mutex_lock(&mu);
  if (files[fd] != NULL) die("descriptor already tracked", fd);
  __atomic_store_n(&files[fd], t, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&mu);
}

/* Records one write (data != NULL) or truncate; returns the bytes "written" or 0. */
static void record(struct tracked *t, int fd, off_t offset, const void *data, size_t length,
                   int truncate) {
  struct op *o = malloc(sizeof *o + (truncate ? 0 : length));
  if (o == NULL) die("out of memory", fd);
  o->next = NULL;
  o->offset = offset;
  o->length = length;
  o->truncate = truncate;
  if (!truncate) memcpy(o->data, data, length);
  *t->tail = o;
  t->tail = &o->next;
}

static ssize_t tracked_write(int fd, const void *buf, size_t n, off_t at, int positional) {
  pthread_mutex_lock(&mu);
  struct tracked *t = lookup(fd);
  if (t == NULL) {  /* closed meanwhile */
    pthread_mutex_unlock(&mu);
    return positional ? real_pwrite(fd, buf, n, at) : real_write(fd, buf, n);
  }
  /* Linux appends on an O_APPEND descriptor even for pwrite. */
  off_t offset = t->append ? t->size : positional ? at : t->position;
  record(t, fd, offset, buf, n, 0);
  if (offset + (off_t)n > t->size) t->size = offset + (off_t)n;
  if (!positional) t->position = offset + (off_t)n;
  pthread_mutex_unlock(&mu);
  return (ssize_t)n;
}

/* Applies the recorded operations to the file, in order; -1 with errno on failure. */
static int apply(int fd) {
  pthread_mutex_lock(&mu);
  struct tracked *t = lookup(fd);
  int rc = 0, err = 0;
  if (t != NULL && t->head != NULL) {
    int flags = fcntl(fd, F_GETFL);
    /* pwrite must land at the recorded offsets, so O_APPEND is lifted while applying. */
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_APPEND) != 0) {
      rc = -1;
      err = errno;
    }
    for (struct op *o = t->head; rc == 0 && o != NULL; o = o->next) {
      if (o->truncate) {
        if (real_ftruncate(fd, o->offset) != 0) rc = -1, err = errno;
        continue;
      }
      size_t done = 0;
      while (done < o->length) {
        ssize_t w = real_pwrite(fd, o->data + done, o->length - done, o->offset + (off_t)done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          rc = -1;
          err = w < 0 ? errno : EIO;
          break;
        }
        done += (size_t)w;
      }
    }
    if (flags >= 0) (void)fcntl(fd, F_SETFL, flags);
    drop_ops(t);
  }
  pthread_mutex_unlock(&mu);
  errno = err;
  return rc;
}

/* --- the intercepted calls --- */

static int open_common(int dirfd, const char *path, int flags, mode_t mode, int at) {
  if (real_close == NULL) init();
  int fd = at ? real_openat(dirfd, path, flags, mode) : real_open(path, flags, mode);
  if (fd >= 0 && prefix != NULL) {
    int saved = errno;
    start_tracking(fd, path, flags);
    errno = saved;
  }
  return fd;
}

#define MODE_ARG(flags, mode)                          \
  do {                                                 \
    if ((flags) & (O_CREAT | O_TMPFILE)) {             \
      va_list ap;                                      \
      va_start(ap, flags);                             \
      mode = (mode_t)va_arg(ap, int);                  \
      va_end(ap);                                      \
    }                                                  \
  } while (0)

int open(const char *path, int flags, ...) {
  mode_t mode = 0;
  MODE_ARG(flags, mode);
  return open_common(AT_FDCWD, path, flags, mode, 0);
}

int open64(const char *path, int flags, ...) {
  mode_t mode = 0;
  MODE_ARG(flags, mode);
  return open_common(AT_FDCWD, path, flags, mode, 0);
}

int openat(int dirfd, const char *path, int flags, ...) {
  mode_t mode = 0;
  MODE_ARG(flags, mode);
  return open_common(dirfd, path, flags, mode, 1);
}

int openat64(int dirfd, const char *path, int flags, ...) {
  mode_t mode = 0;
  MODE_ARG(flags, mode);
  return open_common(dirfd, path, flags, mode, 1);
}

ssize_t write(int fd, const void *buf, size_t n) {
  if (!any_tracked(fd)) return real_write(fd, buf, n);
  return tracked_write(fd, buf, n, 0, 0);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t offset) {
  if (!any_tracked(fd)) return real_pwrite(fd, buf, n, offset);
  return tracked_write(fd, buf, n, offset, 1);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t offset) {
  return pwrite(fd, buf, n, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
  static ssize_t (*real_writev)(int, const struct iovec *, int);
  if (!any_tracked(fd)) {
    if (real_writev == NULL) {
      real_writev = (ssize_t(*)(int, const struct iovec *, int))dlsym(RTLD_NEXT, "writev");
    }
    return real_writev(fd, iov, count);
  }
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += iov[i].iov_len;
  char *joined = malloc(total ? total : 1);
  if (joined == NULL) die("out of memory", fd);
  for (size_t i = 0, at = 0; i < (size_t)count; at += iov[i].iov_len, ++i) {
    memcpy(joined + at, iov[i].iov_base, iov[i].iov_len);
  }
  ssize_t n = tracked_write(fd, joined, total, 0, 0);
  free(joined);
  return n;
}

int ftruncate(int fd, off_t length) {
  if (!any_tracked(fd)) return real_ftruncate(fd, length);
  pthread_mutex_lock(&mu);
  struct tracked *t = lookup(fd);
  if (t != NULL) {
    record(t, fd, length, NULL, 0, 1);
    t->size = length;
  }
  pthread_mutex_unlock(&mu);
  return t != NULL ? 0 : real_ftruncate(fd, length);
}

int ftruncate64(int fd, off_t length) { return ftruncate(fd, length); }

off_t lseek(int fd, off_t offset, int whence) {
  static off_t (*real_lseek)(int, off_t, int);
  if (!any_tracked(fd)) {
    if (real_lseek == NULL) real_lseek = (off_t(*)(int, off_t, int))dlsym(RTLD_NEXT, "lseek");
    return real_lseek(fd, offset, whence);
  }
  pthread_mutex_lock(&mu);
  struct tracked *t = lookup(fd);
  off_t result = -1;
  if (t == NULL || (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END)) {
    errno = t == NULL ? EBADF : EINVAL;
  } else {
    off_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? t->position : t->size;
    if (base + offset < 0) {
      errno = EINVAL;
    } else {
      result = t->position = base + offset;
    }
  }
  pthread_mutex_unlock(&mu);
  return result;
}

off_t lseek64(int fd, off_t offset, int whence) { return lseek(fd, offset, whence); }

int fdatasync(int fd) {
  if (any_tracked(fd) && apply(fd) != 0) return -1;
  return real_fdatasync(fd);
}

int fsync(int fd) {
  if (any_tracked(fd) && apply(fd) != 0) return -1;
  return real_fsync(fd);
}

int close(int fd) {
  if (any_tracked(fd)) {
    pthread_mutex_lock(&mu);
    struct tracked *t = lookup(fd);
    if (t != NULL) {
      __atomic_store_n(&files[fd], NULL, __ATOMIC_RELEASE);
      drop_ops(t);  /* never synced: lost, as a power loss would lose it */
      free(t);
    }
    pthread_mutex_unlock(&mu);
  }
  return real_close(fd);
}

int rename(const char *from, const char *to) {
  if (real_close == NULL) init();
  if (prefix != NULL && rename_delay_ms > 0 && strncmp(to, prefix, prefix_len) == 0) {
    struct timespec pause = {rename_delay_ms / 1000, (rename_delay_ms % 1000) * 1000000L};
    while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {
    }
  }
  return real_rename(from, to);
}
