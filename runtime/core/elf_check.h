/* Is a file a whole ELF shared library, before dlopen maps it? dlopen maps each segment from the
 * offsets the file names and reads the pages as it relocates, so a truncated copy of a library kills
 * the process with SIGBUS instead of failing. */
#ifndef VOLT8_ELF_CHECK_H
#define VOLT8_ELF_CHECK_H

#include <stddef.h>
#include <stdint.h>

/* 0 when `path` is a regular file holding an ELF64 shared object of this process's byte order and
 * machine whose program header table, section header table and every segment's file bytes lie
 * within the file. Else -1, with the reason in `reason` worded to follow the path ("is truncated:
 * segment 2 (LOAD) ends at byte 80468466, past its 1048576 bytes", "is a FIFO, not a regular file").
 * Never blocks on a FIFO or device. */
int volt8_elf_check(const char *path, char *reason, size_t reason_size);

/* The same checks on the first `available` bytes of a file of `file_bytes` bytes (the headers the
 * check needs must be among them, else the reason says they could not be read). */
int volt8_elf_check_bytes(const uint8_t *bytes, size_t available, uint64_t file_bytes, char *reason,
                          size_t reason_size);

#endif
