/* The ELF checks run before dlopen (elf_check.h). */
#include "core/elf_check.h"

#include "core/files.h"

#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#elif defined(__powerpc64__)
#define HOST_MACHINE EM_PPC64
#endif

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HOST_DATA ELFDATA2LSB
#else
#define HOST_DATA ELFDATA2MSB
#endif

/* More program headers than this is no library (one has about ten). */
#define MAX_PROGRAM_HEADERS 4096

__attribute__((format(printf, 3, 4))) static int refuse(char *reason, size_t reason_size, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  if (reason && reason_size) vsnprintf(reason, reason_size, fmt, args);
  va_end(args);
  return -1;
}

static const char *segment_type_name(uint32_t type) {
  switch (type) {
    case PT_LOAD: return "LOAD";
    case PT_DYNAMIC: return "DYNAMIC";
    case PT_INTERP: return "INTERP";
    case PT_NOTE: return "NOTE";
    case PT_PHDR: return "PHDR";
    case PT_TLS: return "TLS";
    case PT_GNU_EH_FRAME: return "GNU_EH_FRAME";
    case PT_GNU_RELRO: return "GNU_RELRO";
    default: return "other";
  }
}

/* The end of `count` records of `size` bytes at `offset`, or UINT64_MAX when that overflows. */
static uint64_t table_end(uint64_t offset, uint64_t count, uint64_t size) {
  if (count && size > (UINT64_MAX - offset) / count) return UINT64_MAX;
  return offset + count * size;
}

static int check_header(const Elf64_Ehdr *header, uint64_t file_bytes, char *reason, size_t reason_size) {
  if (memcmp(header->e_ident, ELFMAG, SELFMAG) != 0) return refuse(reason, reason_size, "is not an ELF file (no ELF magic)");
  if (header->e_ident[EI_CLASS] != ELFCLASS64) return refuse(reason, reason_size, "is not a 64-bit ELF file");
  if (header->e_ident[EI_DATA] != HOST_DATA) return refuse(reason, reason_size, "is an ELF file of the other byte order");
  if (header->e_type != ET_DYN)
    return refuse(reason, reason_size, "is not an ELF shared library (ELF type %u)", (unsigned)header->e_type);
#ifdef HOST_MACHINE
  if (header->e_machine != HOST_MACHINE)
    return refuse(reason, reason_size, "is an ELF library for another machine (e_machine %u, this one is %u)",
                  (unsigned)header->e_machine, (unsigned)HOST_MACHINE);
#endif
  if (header->e_phentsize != sizeof(Elf64_Phdr) || header->e_phnum == 0 || header->e_phnum > MAX_PROGRAM_HEADERS)
    return refuse(reason, reason_size, "has a malformed program header table (%u entries of %u bytes)",
                  (unsigned)header->e_phnum, (unsigned)header->e_phentsize);
  uint64_t end = table_end(header->e_phoff, header->e_phnum, sizeof(Elf64_Phdr));
  if (end > file_bytes)
    return refuse(reason, reason_size, "is truncated: its program header table ends at byte %llu, past its %llu bytes",
                  (unsigned long long)end, (unsigned long long)file_bytes);
  return 0;
}

/* After the segments, which say more of a truncated file. */
static int check_sections(const Elf64_Ehdr *header, uint64_t file_bytes, char *reason, size_t reason_size) {
  if (header->e_shoff == 0) return 0;
  if (header->e_shentsize != sizeof(Elf64_Shdr))
    return refuse(reason, reason_size, "has a malformed section header table (entries of %u bytes)",
                  (unsigned)header->e_shentsize);
  /* e_shnum 0 with a table: the count is in the first entry (more than 0xff00 sections), so one at
   * least must be there */
  uint64_t end = table_end(header->e_shoff, header->e_shnum ? header->e_shnum : 1, sizeof(Elf64_Shdr));
  if (end > file_bytes)
    return refuse(reason, reason_size, "is truncated: its section header table ends at byte %llu, past its %llu bytes",
                  (unsigned long long)end, (unsigned long long)file_bytes);
  return 0;
}

static int check_segments(const Elf64_Phdr *segments, unsigned count, uint64_t file_bytes, char *reason,
                          size_t reason_size) {
  unsigned loads = 0;
  for (unsigned i = 0; i < count; i++) {
    const Elf64_Phdr *segment = &segments[i];
    loads += segment->p_type == PT_LOAD;
    if (segment->p_filesz == 0) continue;
    uint64_t end = table_end(segment->p_offset, 1, segment->p_filesz);
    if (end > file_bytes)
      return refuse(reason, reason_size, "is truncated: segment %u (%s) ends at byte %llu, past its %llu bytes", i,
                    segment_type_name(segment->p_type), (unsigned long long)end, (unsigned long long)file_bytes);
  }
  return loads ? 0 : refuse(reason, reason_size, "is not a loadable ELF library (no LOAD segment)");
}

int volt8_elf_check_bytes(const uint8_t *bytes, size_t available, uint64_t file_bytes, char *reason,
                          size_t reason_size) {
  Elf64_Ehdr header;
  if (file_bytes < sizeof header)
    return refuse(reason, reason_size, "is not an ELF library: %llu bytes, shorter than an ELF header",
                  (unsigned long long)file_bytes);
  if (available < sizeof header) return refuse(reason, reason_size, "cannot be read: its ELF header is missing");
  memcpy(&header, bytes, sizeof header);
  if (check_header(&header, file_bytes, reason, reason_size) != 0) return -1;
  uint64_t table_bytes = (uint64_t)header.e_phnum * sizeof(Elf64_Phdr);
  if (header.e_phoff > available || table_bytes > available - header.e_phoff)
    return refuse(reason, reason_size, "cannot be read: its program header table is missing");
  Elf64_Phdr *segments = malloc((size_t)table_bytes);
  if (!segments) return refuse(reason, reason_size, "cannot be checked: out of memory");
  memcpy(segments, bytes + header.e_phoff, (size_t)table_bytes);
  int result = check_segments(segments, header.e_phnum, file_bytes, reason, reason_size);
  free(segments);
  return result == 0 ? check_sections(&header, file_bytes, reason, reason_size) : result;
}

int volt8_elf_check(const char *path, char *reason, size_t reason_size) {
  int fd = -1;
  struct stat info;
  int failure = volt8_open_regular_fd(path, &fd, &info);
  if (failure == -1)
    return refuse(reason, reason_size, "is a %s, not a regular file", volt8_file_type_name(info.st_mode));
  if (failure != 0) return refuse(reason, reason_size, "cannot open: %s", strerror(failure));
  uint64_t file_bytes = (uint64_t)info.st_size;
  Elf64_Ehdr header;
  Elf64_Phdr *segments = NULL;
  int result = -1;
  if (file_bytes < sizeof header) {
    result = volt8_elf_check_bytes(NULL, 0, file_bytes, reason, reason_size);
  } else if (volt8_read_fully_at(fd, &header, sizeof header, 0) != 0) {
    refuse(reason, reason_size, "cannot read its ELF header");
  } else if (check_header(&header, file_bytes, reason, reason_size) == 0) {
    /* check_header put the table within the file and bounded its entries */
    size_t table_bytes = (size_t)header.e_phnum * sizeof *segments;
    if (!(segments = malloc(table_bytes))) refuse(reason, reason_size, "cannot be checked: out of memory");
    else if (volt8_read_fully_at(fd, segments, table_bytes, (off_t)header.e_phoff) != 0)
      refuse(reason, reason_size, "cannot read its program header table");
    else if (check_segments(segments, header.e_phnum, file_bytes, reason, reason_size) == 0)
      result = check_sections(&header, file_bytes, reason, reason_size);
  }
  free(segments);
  close(fd);
  return result;
}
