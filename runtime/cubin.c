/* Reader of cubin ELF images through libelf. Facts used (cuda-compat.md
 * section 5, rechecked on CUDA 13.0.88 cubins, see tests/fixtures/README.md):
 * - e_machine 190 (EM_CUDA); EI_OSABI 0x33 (ABI V1) or 0x41 (ABI V2);
 *   EI_ABIVERSION 7 (V1) or 8 (V2).
 * - SM: V1 e_flags bits 0-7, V2 bits 8-15. 'a': V1 e_flags 0x800; V2 the
 *   .nv.compat section (type 0x70000086) carries attribute 9 = 1.
 * - Toolkit: V1 e_version = 10*major+minor; V2 note type 0x3e8 (owner
 *   "NVIDIA Corp") with desc {u16 2, u16 sm, u16 10*major+minor, u16 0}.
 * - Tool strings: note type 0x7d0, desc = 6 u32 words (first = 2) then NUL-separated strings.
 * - Kernels: STT_FUNC symbols with st_other bit 0x10 (STO_CUDA_ENTRY) defined
 *   in a section named ".text.<symbol name>". The st_other bit is what tells
 *   a kernel from an -rdc __device__ function, which also gets its own
 *   .text.<name> section.
 * Every offset and size libelf hands back is rechecked against the input size. */
#include "cubin.h"

#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "error.h"

#define EM_CUDA_MACHINE 190
#define OSABI_CUDA_V1 0x33
#define OSABI_CUDA_V2 0x41
#define ABI_V2 8
#define V1_FLAG_ARCH_SPECIFIC 0x800u
#define SHT_NV_COMPAT 0x70000086u
#define COMPAT_ATTR_ARCH_SPECIFIC 9
#define NOTE_CUINFO 0x3e8u
#define NOTE_TKINFO 0x7d0u
#define NOTE_OWNER "NVIDIA Corp"
#define TKINFO_HEADER_SIZE 24u /* six u32 words before the strings */
#define STO_CUDA_ENTRY 0x10u

static pthread_once_t elf_once = PTHREAD_ONCE_INIT;
static int elf_ready;

static void init_libelf(void) { elf_ready = elf_version(EV_CURRENT) != EV_NONE; }

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* Appends name to the comma-separated list, truncating at cap - 1 bytes. */
static void append_name(char *list, size_t cap, size_t *len, const char *name) {
  if (!list || cap == 0) return;
  if (*len > 0 && *len + 1 < cap) list[(*len)++] = ',';
  for (const char *p = name; *p && *len + 1 < cap; p++) list[(*len)++] = *p;
  list[*len] = '\0';
}

/* Checks the identification bytes before libelf sees the image, so the
 * answer for a non-cubin is UNSUPPORTED, not a libelf message. */
static em_status check_ident(const uint8_t *b, size_t size) {
  if (size < 4 || memcmp(b, ELFMAG, SELFMAG) != 0)
    return em_fail(EM_ERR_CORRUPT, "cubin: offset 0: not an ELF image (magic 7F 45 4C 46 missing)");
  if (size < sizeof(Elf64_Ehdr))
    return em_fail(EM_ERR_CORRUPT, "cubin: %zu bytes, shorter than the 64-byte ELF header; the image is truncated",
                   size);
  int little = b[EI_DATA] == ELFDATA2LSB;
  unsigned machine = little ? rd16(b + 18) : (unsigned)((b[18] << 8) | b[19]);
  if (machine != EM_CUDA_MACHINE)
    return em_fail(EM_ERR_UNSUPPORTED, "cubin: offset 18: e_machine %u, expected %u (EM_CUDA); this ELF is not a cubin",
                   machine, EM_CUDA_MACHINE);
  if (b[EI_CLASS] != ELFCLASS64 || !little)
    return em_fail(EM_ERR_UNSUPPORTED,
                   "cubin: offset 4: ELF class %u / data %u, only 64-bit little-endian cubins are supported "
                   "(rebuild without -m32)",
                   b[EI_CLASS], b[EI_DATA]);
  if (b[EI_OSABI] != OSABI_CUDA_V1 && b[EI_OSABI] != OSABI_CUDA_V2)
    return em_fail(EM_ERR_UNSUPPORTED, "cubin: offset 7: EI_OSABI 0x%02x, expected 0x33 (CUDA ABI V1) or 0x41 (V2)",
                   b[EI_OSABI]);
  return EM_OK;
}

/* Checks that a table of n entries of entsize bytes at off lies inside size. */
static int table_fits(uint64_t off, uint64_t n, uint64_t entsize, size_t size) {
  if (off > size) return 0;
  if (entsize != 0 && n > (size - off) / entsize) return 0;
  return 1;
}

/* libelf checks the section header table, but not every later use; these
 * checks give the offset of what is wrong instead of a generic libelf error. */
static em_status check_tables(const GElf_Ehdr *eh, size_t shnum, size_t size) {
  if (shnum == 0)
    return em_fail(EM_ERR_CORRUPT, "cubin: offset 60: no section headers; the image is truncated or damaged");
  if (eh->e_shentsize != sizeof(Elf64_Shdr) ||
      !table_fits(eh->e_shoff, shnum, sizeof(Elf64_Shdr), size))
    return em_fail(EM_ERR_CORRUPT,
                   "cubin: section header table at offset %llu (%zu entries of %u bytes) does not fit in "
                   "the %zu-byte image; it is truncated or damaged",
                   (unsigned long long)eh->e_shoff, shnum, eh->e_shentsize, size);
  if (eh->e_phnum != 0 && (eh->e_phentsize != sizeof(Elf64_Phdr) ||
                           !table_fits(eh->e_phoff, eh->e_phnum, sizeof(Elf64_Phdr), size)))
    return em_fail(EM_ERR_CORRUPT,
                   "cubin: program header table at offset %llu (%u entries of %u bytes) does not fit in "
                   "the %zu-byte image; it is truncated or damaged",
                   (unsigned long long)eh->e_phoff, eh->e_phnum, eh->e_phentsize, size);
  return EM_OK;
}

/* Checks that a section's bytes lie inside the image (NOBITS occupy none). */
static em_status check_section(const GElf_Shdr *sh, size_t size, size_t index) {
  if (sh->sh_type == SHT_NOBITS || sh->sh_size == 0) return EM_OK;
  if (sh->sh_offset > size || sh->sh_size > size - sh->sh_offset)
    return em_fail(EM_ERR_CORRUPT,
                   "cubin: section %zu at offset %llu, size %llu, runs past the end of the %zu-byte image; "
                   "it is truncated or damaged",
                   index, (unsigned long long)sh->sh_offset, (unsigned long long)sh->sh_size, size);
  return EM_OK;
}

/* The section's data as libelf types it (notes and symbols need elf_getdata,
 * not elf_rawdata, for gelf_getnote / gelf_getsym to accept it). NULL data
 * with EM_OK means the section is empty. */
static em_status section_data(Elf_Scn *scn, const GElf_Shdr *sh, size_t size, size_t index, Elf_Data **out) {
  *out = NULL;
  em_status s = check_section(sh, size, index);
  if (s != EM_OK || sh->sh_type == SHT_NOBITS || sh->sh_size == 0) return s;
  Elf_Data *d = elf_getdata(scn, NULL);
  if (!d || !d->d_buf || d->d_size != sh->sh_size)
    return em_fail(EM_ERR_CORRUPT, "cubin: section %zu at offset %llu cannot be read: %s", index,
                   (unsigned long long)sh->sh_offset, elf_errmsg(-1));
  *out = d;
  return EM_OK;
}

/* Reads the .nv.compat attribute list ({u8 fmt, u8 attr, value} records:
 * fmt 1 = no value, 2 = u8 value + pad, 3 = u16 value, 4 = u16 size + bytes;
 * every record but fmt 4 is 4 bytes) and sets 'a' when attribute 9 is 1. */
static em_status read_compat(const uint8_t *b, size_t n, uint64_t file_off, em_cubin_info *out) {
  size_t i = 0;
  while (i < n) {
    if (n - i < 4)
      return em_fail(EM_ERR_CORRUPT, "cubin: .nv.compat record at offset %llu is cut short (%zu bytes left)",
                     (unsigned long long)(file_off + i), n - i);
    unsigned fmt = b[i], attr = b[i + 1];
    unsigned value;
    size_t len = 4;
    switch (fmt) {
      case 1: value = 0; break;
      case 2: value = b[i + 2]; break;
      case 3: value = rd16(b + i + 2); break;
      case 4:
        len = 4 + (size_t)rd16(b + i + 2);
        if (len > n - i)
          return em_fail(EM_ERR_CORRUPT,
                         "cubin: .nv.compat record at offset %llu claims %zu bytes, only %zu are left",
                         (unsigned long long)(file_off + i), len, n - i);
        value = 0;
        break;
      default:
        return em_fail(EM_ERR_CORRUPT, "cubin: .nv.compat record at offset %llu has unknown format %u",
                       (unsigned long long)(file_off + i), fmt);
    }
    if (attr == COMPAT_ATTR_ARCH_SPECIFIC && fmt != 4 && value == 1) out->variant = 'a';
    i += len;
  }
  return EM_OK;
}

/* Copies the tool strings of a tkinfo note as one printable line, "; "-separated. */
static void read_tkinfo(const uint8_t *desc, size_t n, em_cubin_info *out) {
  /* The first word is 2 in every note of CUDA 13 and 0x81 in the V2 cubins of
   * CUDA 12.9 (sm_100 and up), with the same layout after it (six u32 words,
   * then the strings; tests/fixtures/README.md); another value means an
   * unknown layout. */
  if (n <= TKINFO_HEADER_SIZE || (rd16(desc) != 2 && rd16(desc) != 0x81) || rd16(desc + 2) != 0) return;
  size_t len = 0, cap = sizeof out->tool_info;
  int pending_sep = 0;
  for (size_t i = TKINFO_HEADER_SIZE; i < n && len + 1 < cap; i++) {
    unsigned char c = desc[i];
    if (c == '\0') {
      pending_sep = len > 0;
      continue;
    }
    if (pending_sep) {
      for (const char *s = "; "; *s && len + 1 < cap; s++) out->tool_info[len++] = *s;
      pending_sep = 0;
      if (len + 1 >= cap) break;
    }
    out->tool_info[len++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  while (len > 0 && out->tool_info[len - 1] == ' ') len--;
  out->tool_info[len] = '\0';
}

/* Reads NVIDIA notes from one SHT_NOTE section. */
static em_status read_notes(Elf_Scn *scn, const GElf_Shdr *sh, size_t size, size_t index, em_cubin_info *out) {
  Elf_Data *d;
  em_status s = section_data(scn, sh, size, index, &d);
  if (s != EM_OK || !d) return s;
  const uint8_t *b = d->d_buf;
  size_t n = d->d_size, off = 0, name_off, desc_off;
  GElf_Nhdr nh;
  while (off < n) {
    size_t next = gelf_getnote(d, off, &nh, &name_off, &desc_off);
    if (next == 0 || next <= off || name_off > n || nh.n_namesz > n - name_off || desc_off > n ||
        nh.n_descsz > n - desc_off)
      return em_fail(EM_ERR_CORRUPT, "cubin: note at offset %llu in section %zu is malformed or cut short",
                     (unsigned long long)(sh->sh_offset + off), index);
    off = next;
    if (nh.n_namesz != sizeof NOTE_OWNER || memcmp(b + name_off, NOTE_OWNER, sizeof NOTE_OWNER) != 0) continue;
    const uint8_t *desc = b + desc_off;
    /* V1 cubins give the toolkit in e_version; the header contract reads the note for V2 only. */
    if (nh.n_type == NOTE_CUINFO && out->abi_version >= ABI_V2 && nh.n_descsz >= 6 && rd16(desc) == 2) {
      unsigned v = rd16(desc + 4); /* 10*major + minor: 130 = CUDA 13.0 */
      out->toolkit = (int)(v / 10 * 1000 + v % 10 * 10);
    } else if (nh.n_type == NOTE_TKINFO) {
      read_tkinfo(desc, nh.n_descsz, out);
    }
  }
  return EM_OK;
}

/* Counts and lists the kernels of a symbol table. */
static em_status read_kernels(Elf *elf, Elf_Scn *symscn, const GElf_Shdr *symsh, size_t size, size_t index,
                              size_t shnum, size_t shstrndx, em_cubin_info *out, char *kernels, size_t cap) {
  Elf_Data *d;
  em_status s = section_data(symscn, symsh, size, index, &d);
  if (s != EM_OK || !d) return s;
  if (symsh->sh_entsize != sizeof(Elf64_Sym) || symsh->sh_link == 0 || symsh->sh_link >= shnum)
    return em_fail(EM_ERR_CORRUPT,
                   "cubin: symbol table (section %zu) has entry size %llu and string table link %u; expected "
                   "%zu and a valid section",
                   index, (unsigned long long)symsh->sh_entsize, symsh->sh_link, sizeof(Elf64_Sym));
  size_t nsyms = d->d_size / sizeof(Elf64_Sym), len = 0;
  for (size_t i = 0; i < nsyms; i++) {
    GElf_Sym sym;
    if (!gelf_getsym(d, (int)i, &sym))
      return em_fail(EM_ERR_CORRUPT, "cubin: symbol %zu of section %zu cannot be read: %s", i, index,
                     elf_errmsg(-1));
    if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || !(sym.st_other & STO_CUDA_ENTRY)) continue;
    /* Entries past SHN_LORESERVE (extended numbering) never occur in cubins; skip them. */
    if (sym.st_shndx == SHN_UNDEF || sym.st_shndx >= SHN_LORESERVE || sym.st_shndx >= shnum) continue;
    const char *name = elf_strptr(elf, symsh->sh_link, sym.st_name);
    GElf_Shdr tsh;
    Elf_Scn *tscn = elf_getscn(elf, sym.st_shndx);
    if (!name || !tscn || !gelf_getshdr(tscn, &tsh))
      return em_fail(EM_ERR_CORRUPT, "cubin: symbol %zu of section %zu has a bad name (offset %u) or section (%u)",
                     i, index, sym.st_name, sym.st_shndx);
    const char *sec = elf_strptr(elf, shstrndx, tsh.sh_name);
    if (!sec || strncmp(sec, ".text.", 6) != 0 || strcmp(sec + 6, name) != 0) continue;
    out->n_kernels++;
    append_name(kernels, cap, &len, name);
  }
  return EM_OK;
}

/* Checks that every segment's file bytes lie inside the image. */
static em_status check_segments(Elf *elf, size_t size) {
  size_t phnum;
  if (elf_getphdrnum(elf, &phnum) != 0)
    return em_fail(EM_ERR_CORRUPT, "cubin: program header count unreadable: %s", elf_errmsg(-1));
  for (size_t i = 0; i < phnum; i++) {
    GElf_Phdr ph;
    if (!gelf_getphdr(elf, (int)i, &ph))
      return em_fail(EM_ERR_CORRUPT, "cubin: program header %zu cannot be read: %s", i, elf_errmsg(-1));
    if (ph.p_offset > size || ph.p_filesz > size - ph.p_offset)
      return em_fail(EM_ERR_CORRUPT,
                     "cubin: segment %zu at offset %llu, size %llu, runs past the end of the %zu-byte image; "
                     "it is truncated or damaged",
                     i, (unsigned long long)ph.p_offset, (unsigned long long)ph.p_filesz, size);
  }
  return EM_OK;
}

/* Walks the sections once: notes, .nv.compat, the symbol table. */
static em_status read_sections(Elf *elf, const GElf_Ehdr *eh, size_t size, em_cubin_info *out, char *kernels,
                               size_t cap) {
  size_t shnum, shstrndx;
  if (elf_getshdrnum(elf, &shnum) != 0 || elf_getshdrstrndx(elf, &shstrndx) != 0)
    return em_fail(EM_ERR_CORRUPT, "cubin: section count or name table index unreadable: %s", elf_errmsg(-1));
  em_status s = check_tables(eh, shnum, size);
  if (s == EM_OK && eh->e_phnum != 0) s = check_segments(elf, size);
  if (s != EM_OK) return s;
  if (shstrndx == 0 || shstrndx >= shnum)
    return em_fail(EM_ERR_CORRUPT, "cubin: offset 62: section name table index %zu is outside [1, %zu)", shstrndx,
                   shnum);
  for (size_t i = 1; i < shnum; i++) {
    Elf_Scn *scn = elf_getscn(elf, i);
    GElf_Shdr sh;
    if (!scn || !gelf_getshdr(scn, &sh))
      return em_fail(EM_ERR_CORRUPT, "cubin: section header %zu at offset %llu cannot be read: %s", i,
                     (unsigned long long)(eh->e_shoff + i * sizeof(Elf64_Shdr)), elf_errmsg(-1));
    if (sh.sh_type == SHT_NOTE) {
      s = read_notes(scn, &sh, size, i, out);
    } else if (sh.sh_type == SHT_NV_COMPAT) {
      Elf_Data *d;
      s = section_data(scn, &sh, size, i, &d);
      /* V1 marks 'a' in e_flags; the attribute list is read for V2 only. */
      if (s == EM_OK && d && out->abi_version >= ABI_V2) s = read_compat(d->d_buf, d->d_size, sh.sh_offset, out);
    } else if (sh.sh_type == SHT_SYMTAB) {
      s = read_kernels(elf, scn, &sh, size, i, shnum, shstrndx, out, kernels, cap);
    } else {
      s = check_section(&sh, size, i); /* a truncated image must not pass as whole */
    }
    if (s != EM_OK) return s;
  }
  return EM_OK;
}

/* The CUDA version in the tool strings, "Cuda compilation tools, release
 * 12.9, V12.9.86" -> 12090; 0 if they do not say. A V2 cubin of CUDA 12.9
 * (sm_100 and up) has no cuinfo note, only these strings. */
static int toolkit_from_tool_info(const char *s) {
  static const char key[] = "Cuda compilation tools, release ";
  const char *p = strstr(s, key);
  if (!p) return 0;
  p += sizeof key - 1;
  int major = 0, digits = 0;
  for (; *p >= '0' && *p <= '9' && digits < 3; p++, digits++) major = major * 10 + (*p - '0');
  /* "MAJOR.MINOR," with a one-digit minor, as every CUDA release is numbered. */
  if (!digits || major == 0 || p[0] != '.' || p[1] < '0' || p[1] > '9' || p[2] != ',') return 0;
  return major * 1000 + (p[1] - '0') * 10;
}

/* Fills what the ELF header alone says. */
static void read_header(const GElf_Ehdr *eh, em_cubin_info *out) {
  out->abi_version = eh->e_ident[EI_ABIVERSION];
  out->os_abi = eh->e_ident[EI_OSABI];
  out->is_relocatable = eh->e_type == ET_REL;
  if (out->abi_version >= ABI_V2) {
    out->sm = (int)((eh->e_flags >> 8) & 0xffu);
  } else {
    out->sm = (int)(eh->e_flags & 0xffu);
    if (eh->e_flags & V1_FLAG_ARCH_SPECIFIC) out->variant = 'a';
    /* e_version is 10*major+minor (123 = CUDA 12.3); 1 or other small values mean unknown. */
    if (eh->e_version >= 30 && eh->e_version < 1000)
      out->toolkit = (int)(eh->e_version / 10 * 1000 + eh->e_version % 10 * 10);
  }
}

em_status em_cubin_read_header(const void *data, size_t size, em_cubin_info *out) {
  if (!out || (!data && size))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_cubin_read_header: out is NULL or data is NULL with size %zu", size);
  memset(out, 0, sizeof *out);
  em_status s = check_ident(data, size);
  if (s != EM_OK) return s;
  /* check_ident found a 64-bit little-endian ELF header: Elf64_Ehdr's layout. */
  GElf_Ehdr eh;
  memcpy(&eh, data, sizeof(Elf64_Ehdr));
  read_header(&eh, out);
  return EM_OK;
}

em_status em_cubin_read(const void *data, size_t size, em_cubin_info *out, char *kernels, size_t kernels_cap) {
  if (!out || (!data && size))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_cubin_read: out is NULL or data is NULL with size %zu", size);
  memset(out, 0, sizeof *out);
  if (kernels && kernels_cap) kernels[0] = '\0';
  em_status s = check_ident(data, size);
  if (s != EM_OK) return s;

  pthread_once(&elf_once, init_libelf);
  if (!elf_ready) return em_fail(EM_ERR_INTERNAL, "cubin: libelf refused EV_CURRENT: %s", elf_errmsg(-1));
  /* elf_memory takes a non-const pointer, but an image opened for reading is
   * never written: libelf copies whatever it must convert or realign. */
  Elf *elf = elf_memory((char *)(uintptr_t)data, size);
  if (!elf) return em_fail(EM_ERR_CORRUPT, "cubin: libelf cannot open the image: %s", elf_errmsg(-1));
  GElf_Ehdr eh;
  if (elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh)) {
    s = em_fail(EM_ERR_CORRUPT, "cubin: offset 0: ELF header unreadable: %s", elf_errmsg(-1));
  } else {
    read_header(&eh, out);
    s = read_sections(elf, &eh, size, out, kernels, kernels_cap);
    /* V1 gives the toolkit in e_version, V2 in the cuinfo note; else the tool strings. */
    if (s == EM_OK && out->abi_version >= ABI_V2 && !out->toolkit) out->toolkit = toolkit_from_tool_info(out->tool_info);
  }
  elf_end(elf);
  if (s != EM_OK) {
    memset(out, 0, sizeof *out);
    if (kernels && kernels_cap) kernels[0] = '\0';
  }
  return s;
}
