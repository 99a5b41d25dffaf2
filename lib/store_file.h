/* File store queries for the tests (front ends use s4k_dev_readonly and
 * s4k_dev_store_info). */
#ifndef S4K_STORE_FILE_H
#define S4K_STORE_FILE_H

#include <stdbool.h>

#include "sect4k/sect4k.h"

/* One line saying how the store serves, e.g. "file=/x/disk.img: regular
 * file, 1073741824 bytes, io_uring, buffered, read-write". */
const char *s4k_file_store_info (const struct s4k_store *s);
/* True if the store was opened read-only (asked for, or the file cannot
 * be opened for writing); writes then fail with EROFS. */
bool s4k_file_store_readonly (const struct s4k_store *s);
/* True if reads and writes go through io_uring, false for pread/pwrite. */
bool s4k_file_store_uring (const struct s4k_store *s);

#endif
