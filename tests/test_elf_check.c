/* The ELF check run before dlopen (core/elf_check.h), on crafted headers: what a whole library of
 * this machine looks like, and each way a file can fail to be one, with the reason it gives. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "core/elf_check.h"
#if __has_include("cublas_loader.h") /* the harness, configured unless VOLT8_BUILD_BENCH is off */
#define HAVE_BENCH 1
#include "cublas_loader.h"
#endif
#include "test_support.h"

#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__)
#define MACHINE EM_X86_64
#elif defined(__aarch64__)
#define MACHINE EM_AARCH64
#else
#define MACHINE EM_NONE
#endif

/* A library of FILE_BYTES bytes: the ELF header, three program headers (LOAD of the first page,
 * LOAD of the rest, a TLS of no file bytes past the end), and 4 section headers at the end. */
enum { FILE_BYTES = 8192, SECTIONS = 4 };
typedef struct crafted {
  Elf64_Ehdr header;
  Elf64_Phdr segments[3];
} crafted;

static crafted whole_library(void) {
  crafted file;
  memset(&file, 0, sizeof file);
  memcpy(file.header.e_ident, ELFMAG, SELFMAG);
  file.header.e_ident[EI_CLASS] = ELFCLASS64;
  file.header.e_ident[EI_DATA] = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;
  file.header.e_ident[EI_VERSION] = EV_CURRENT;
  file.header.e_type = ET_DYN;
  file.header.e_machine = MACHINE;
  file.header.e_version = EV_CURRENT;
  file.header.e_phoff = sizeof file.header;
  file.header.e_ehsize = sizeof file.header;
  file.header.e_phentsize = sizeof(Elf64_Phdr);
  file.header.e_phnum = 3;
  file.header.e_shentsize = sizeof(Elf64_Shdr);
  file.header.e_shnum = SECTIONS;
  file.header.e_shoff = FILE_BYTES - SECTIONS * sizeof(Elf64_Shdr);
  file.segments[0] = (Elf64_Phdr){.p_type = PT_LOAD, .p_offset = 0, .p_filesz = 4096, .p_memsz = 4096};
  file.segments[1] = (Elf64_Phdr){.p_type = PT_LOAD, .p_offset = 4096, .p_filesz = 3000, .p_memsz = 9000};
  file.segments[2] = (Elf64_Phdr){.p_type = PT_TLS, .p_offset = 1u << 30, .p_filesz = 0, .p_memsz = 32};
  return file;
}

static int check(const crafted *file, uint64_t file_bytes, char *reason, size_t reason_size) {
  reason[0] = '\0';
  return volt8_elf_check_bytes((const uint8_t *)file, sizeof *file, file_bytes, reason, reason_size);
}

Test(elf_check, a_whole_library_passes) {
  crafted file = whole_library();
  char reason[256];
  cr_assert_eq(check(&file, FILE_BYTES, reason, sizeof reason), 0, "%s", reason);
  file.header.e_shoff = 0; /* no section header table at all (stripped of it) */
  file.header.e_shnum = 0;
  cr_assert_eq(check(&file, FILE_BYTES, reason, sizeof reason), 0, "%s", reason);
}

typedef struct broken_case {
  const char *what;
  int field;
  uint64_t value;
  uint64_t file_bytes;
  const char *reason;
} broken_case;

enum {
  MAGIC, CLASS, DATA, TYPE, MACHINE_FIELD, PHENTSIZE, PHNUM, PHOFF, SHOFF, SHENTSIZE, SHNUM_ZERO,
  LOAD1_FILESZ, LOAD1_OFFSET, SECOND_TYPE_TLS, NONE
};

static void apply(crafted *file, int field, uint64_t value) {
  switch (field) {
    case MAGIC: file->header.e_ident[EI_MAG1] = (unsigned char)value; break;
    case CLASS: file->header.e_ident[EI_CLASS] = (unsigned char)value; break;
    case DATA: file->header.e_ident[EI_DATA] = (unsigned char)value; break;
    case TYPE: file->header.e_type = (Elf64_Half)value; break;
    case MACHINE_FIELD: file->header.e_machine = (Elf64_Half)value; break;
    case PHENTSIZE: file->header.e_phentsize = (Elf64_Half)value; break;
    case PHNUM: file->header.e_phnum = (Elf64_Half)value; break;
    case PHOFF: file->header.e_phoff = value; break;
    case SHOFF: file->header.e_shoff = value; break;
    case SHENTSIZE: file->header.e_shentsize = (Elf64_Half)value; break;
    case SHNUM_ZERO: file->header.e_shnum = 0; file->header.e_shoff = value; break;
    case LOAD1_FILESZ: file->segments[1].p_filesz = value; break;
    case LOAD1_OFFSET: file->segments[1].p_offset = value; break;
    case SECOND_TYPE_TLS: file->segments[0].p_type = PT_TLS; file->segments[1].p_type = PT_DYNAMIC; break;
    default: break;
  }
}

/* Indexed by the parameter (a pointer parameter would not survive into the test's own process). */
static const broken_case cases[] = {
    {"truncated below the header", NONE, 0, 40, "is not an ELF library: 40 bytes, shorter than an ELF header"},
    {"no magic", MAGIC, 'X', FILE_BYTES, "is not an ELF file (no ELF magic)"},
    {"32-bit", CLASS, ELFCLASS32, FILE_BYTES, "is not a 64-bit ELF file"},
    {"other byte order", DATA, __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2MSB : ELFDATA2LSB, FILE_BYTES,
     "is an ELF file of the other byte order"},
    {"an executable", TYPE, ET_EXEC, FILE_BYTES, "is not an ELF shared library (ELF type 2)"},
    {"a relocatable object", TYPE, ET_REL, FILE_BYTES, "is not an ELF shared library (ELF type 1)"},
#if MACHINE != EM_NONE
    {"another machine", MACHINE_FIELD, MACHINE == EM_X86_64 ? EM_AARCH64 : EM_X86_64, FILE_BYTES,
     "is an ELF library for another machine"},
#endif
    {"program headers of the wrong size", PHENTSIZE, 32, FILE_BYTES,
     "has a malformed program header table (3 entries of 32 bytes)"},
    {"no program header", PHNUM, 0, FILE_BYTES, "has a malformed program header table (0 entries of 56 bytes)"},
    {"program headers past the end", PHOFF, FILE_BYTES - 100, FILE_BYTES,
     "is truncated: its program header table ends at byte 8260, past its 8192 bytes"},
    {"program header offset that overflows", PHOFF, UINT64_MAX - 10, FILE_BYTES,
     "is truncated: its program header table ends at byte 18446744073709551615"},
    {"section headers past the end", SHOFF, FILE_BYTES - 64, FILE_BYTES,
     "is truncated: its section header table ends at byte 8384, past its 8192 bytes"},
    {"section headers of the wrong size", SHENTSIZE, 40, FILE_BYTES,
     "has a malformed section header table (entries of 40 bytes)"},
    {"an extended section count whose first entry is past the end", SHNUM_ZERO, FILE_BYTES, FILE_BYTES,
     "is truncated: its section header table ends at byte 8256, past its 8192 bytes"},
    {"the file cut inside a segment", NONE, 0, 7000,
     "is truncated: segment 1 (LOAD) ends at byte 7096, past its 7000 bytes"},
    {"the file cut inside the first segment", NONE, 0, 4000,
     "is truncated: segment 0 (LOAD) ends at byte 4096, past its 4000 bytes"},
    {"a segment longer than the file", LOAD1_FILESZ, 1u << 20, FILE_BYTES,
     "is truncated: segment 1 (LOAD) ends at byte 1052672, past its 8192 bytes"},
    {"a segment whose end overflows", LOAD1_OFFSET, UINT64_MAX - 100, FILE_BYTES,
     "is truncated: segment 1 (LOAD) ends at byte 18446744073709551615"},
    {"no LOAD segment", SECOND_TYPE_TLS, 0, FILE_BYTES, "is not a loadable ELF library (no LOAD segment)"},
};
enum { CASES = sizeof cases / sizeof cases[0] };

ParameterizedTestParameters(elf_check, each_fault_is_refused_with_its_reason) {
  static int indices[CASES];
  for (int i = 0; i < CASES; i++) indices[i] = i;
  return cr_make_param_array(int, indices, CASES);
}

ParameterizedTest(int *index, elf_check, each_fault_is_refused_with_its_reason) {
  const broken_case *c = &cases[*index];
  crafted file = whole_library();
  apply(&file, c->field, c->value);
  char reason[256];
  cr_assert_eq(check(&file, c->file_bytes, reason, sizeof reason), -1, "%s passed the check", c->what);
  cr_assert(strncmp(reason, c->reason, strlen(c->reason)) == 0, "%s: \"%s\", expected \"%s\"", c->what, reason,
            c->reason);
}

/* The file-reading check agrees with the in-memory one and names what is not a file. */
Test(elf_check, files_are_read_and_named) {
  char dir[512], path[600], reason[256];
  test_make_temp_dir(dir, sizeof dir, "volt8-elf-check");
  crafted file = whole_library();
  snprintf(path, sizeof path, "%s/libwhole.so", dir);
  FILE *stream = fopen(path, "wb");
  cr_assert(stream && fwrite(&file, 1, sizeof file, stream) == sizeof file && fclose(stream) == 0);
  cr_assert_eq(truncate(path, FILE_BYTES), 0);
  cr_assert_eq(volt8_elf_check(path, reason, sizeof reason), 0, "%s", reason);
  cr_assert_eq(truncate(path, 7000), 0);
  cr_assert_eq(volt8_elf_check(path, reason, sizeof reason), -1);
  cr_assert_str_eq(reason, "is truncated: segment 1 (LOAD) ends at byte 7096, past its 7000 bytes");
  cr_assert_eq(truncate(path, 10), 0);
  cr_assert_eq(volt8_elf_check(path, reason, sizeof reason), -1);
  cr_assert_str_eq(reason, "is not an ELF library: 10 bytes, shorter than an ELF header");
  cr_assert_eq(volt8_elf_check(dir, reason, sizeof reason), -1);
  cr_assert_str_eq(reason, "is a directory, not a regular file");
  snprintf(path, sizeof path, "%s/fifo.so", dir);
  cr_assert_eq(mkfifo(path, 0600), 0);
  cr_assert_eq(volt8_elf_check(path, reason, sizeof reason), -1); /* and returns: a FIFO is never read */
  cr_assert_str_eq(reason, "is a FIFO, not a regular file");
  snprintf(path, sizeof path, "%s/missing.so", dir);
  cr_assert_eq(volt8_elf_check(path, reason, sizeof reason), -1);
  cr_assert_str_eq(reason, "cannot open: No such file or directory");
  test_remove_tree(dir);
}

/* The NVRTC the suites use passes, and so does the C library this test runs on. */
Test(elf_check, real_libraries_pass) {
  char reason[256];
  const char *dirs = getenv("VOLT8_NVRTC_DIRS");
  if (dirs && *dirs) {
    char path[4096];
    snprintf(path, sizeof path, "%.*s/libnvrtc.so.12", (int)strcspn(dirs, ":"), dirs);
    if (access(path, F_OK) == 0) cr_assert_eq(volt8_elf_check(path, reason, sizeof reason), 0, "%s: %s", path, reason);
  }
  cr_assert_eq(volt8_elf_check(VOLT8_SHARED_LIBRARY, reason, sizeof reason), 0, "%s: %s", VOLT8_SHARED_LIBRARY, reason);
}

#ifdef HAVE_BENCH
/* The bench's cuBLAS loader checks a library it finds by path before dlopen: a truncated one in
 * $CUDA_HOME/lib64 is passed over with the reason (dlopen of it dies of SIGBUS). */
Test(elf_check, the_bench_passes_over_a_truncated_library) {
  char home[512], lib64[600], path[700], why[1024], opened[512] = "";
  test_make_temp_dir(home, sizeof home, "volt8-elf-cuda-home");
  snprintf(lib64, sizeof lib64, "%s/lib64", home);
  cr_assert_eq(mkdir(lib64, 0755), 0);
  snprintf(path, sizeof path, "%s/libvolt8-truncated.so.1", lib64);
  size_t bytes = 0;
  char *library = test_read_whole(VOLT8_SHARED_LIBRARY, &bytes);
  FILE *stream = fopen(path, "wb");
  cr_assert(bytes > 10240 && stream && fwrite(library, 1, 10240, stream) == 10240 && fclose(stream) == 0);
  free(library);
  setenv("CUDA_HOME", home, 1);
  static const char *const names[] = {"libvolt8-truncated.so.1"};
  void *handle = bench_cublas_open_first(names, 1, opened, sizeof opened, why, sizeof why);
  cr_assert_null(handle, "%s opened", opened);
  char expected[800];
  snprintf(expected, sizeof expected, "%s is truncated: segment ", path);
  cr_assert(strstr(why, expected), "no \"%s\" in: %s", expected, why);
  test_remove_tree(home);
}
#endif
