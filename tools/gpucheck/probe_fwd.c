/* The forward-compatibility note of a cuda-compat libcuda (probe.h).
 *
 * Layout, from NVIDIA/nvidia-container-toolkit cmd/nvidia-cdi-hook/cudacompat/
 * cuda-elf-header.go: a section named ".note.cuda.fwd_compatibility" of type
 * SHT_NOTE holding one ELF note whose owner name is "NVIDIA Corporation" and
 * whose descriptor is JSON, e.g. (its test data, libcuda.so.575.57.08)
 *   {"Format":1,"CUDA Version":"12.9","Driver":[535,550,560,565,570,575],
 *    "Device":[1,2,7,8,9,10,11,12,13,14]}
 * A Jetson (Orin) compat library carries only Format and CUDA Version. The
 * note records are walked with libelf's gelf_getnote and the JSON is read
 * with jansson; nothing here is parsed by hand but the mapping of the JSON. */
#include <fcntl.h>
#include <gelf.h>
#include <jansson.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "probe.h"

#define NOTE_SECTION ".note.cuda.fwd_compatibility"
#define NOTE_OWNER "NVIDIA Corporation"

static void reset(gc_fwd_note *out) { memset(out, 0, sizeof *out); }

/* "12.9" -> 12090; 0 when not MAJOR.MINOR with small numbers. */
static int cuda_from_text(const char *s) {
  gc_version v;
  if (gc_probe_parse_version(s, strlen(s), &v) || v.minor < 0 || v.minor > 9 || v.major > 99 || v.major < 1) return 0;
  return v.major * 1000 + v.minor * 10;
}

/* Integers of a JSON array into list; returns how many were skipped
 * (non-integers, out of range, or beyond the list's room). */
static int read_ints(json_t *a, int *list, int *n) {
  int skipped = 0;
  size_t i;
  json_t *e;
  *n = 0;
  json_array_foreach(a, i, e) {
    if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 100000 || *n >= GC_PROBE_MAX_LIST) {
      skipped++;
      continue;
    }
    list[(*n)++] = (int)json_integer_value(e);
  }
  return skipped;
}

int gc_probe_fwd_note_json(const char *json, size_t len, gc_fwd_note *out) {
  reset(out);
  json_error_t err;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    snprintf(out->error, sizeof out->error, "the note's JSON is malformed at line %d column %d: %s", err.line, err.column,
             err.text);
    return -1;
  }
  if (!json_is_object(root)) {
    snprintf(out->error, sizeof out->error, "the note's JSON is not an object");
    json_decref(root);
    return -1;
  }
  json_t *f = json_object_get(root, "Format");
  if (json_is_integer(f) && json_integer_value(f) >= 0 && json_integer_value(f) < 1000000) out->format = (int)json_integer_value(f);
  json_t *c = json_object_get(root, "CUDA Version");
  if (json_is_string(c)) {
    snprintf(out->cuda, sizeof out->cuda, "%s", json_string_value(c));
    out->cuda_version = cuda_from_text(json_string_value(c));
  }
  int skipped = 0;
  json_t *d = json_object_get(root, "Driver");
  if (json_is_array(d)) {
    out->has_drivers = 1;
    skipped += read_ints(d, out->drivers, &out->n_drivers);
  }
  json_t *v = json_object_get(root, "Device");
  if (json_is_array(v)) {
    out->has_devices = 1;
    skipped += read_ints(v, out->devices, &out->n_devices);
  }
  json_decref(root);
  if (!out->cuda_version) {
    snprintf(out->error, sizeof out->error, "the note has no usable \"CUDA Version\" (got '%s')", out->cuda);
    return -1;
  }
  if (skipped)
    snprintf(out->error, sizeof out->error, "%d entr%s of Driver/Device were not small integers and were ignored", skipped,
             skipped == 1 ? "y" : "ies");
  out->found = 1;
  return 0;
}

/* Reads the note from an open ELF. 0 (found or absent), -1 malformed. */
static int from_elf(Elf *e, gc_fwd_note *out) {
  size_t shstrndx;
  if (elf_kind(e) != ELF_K_ELF) {
    snprintf(out->error, sizeof out->error, "not an ELF file");
    return -1;
  }
  if (elf_getshdrstrndx(e, &shstrndx) != 0) {
    snprintf(out->error, sizeof out->error, "ELF section names unreadable: %s", elf_errmsg(-1));
    return -1;
  }
  Elf_Scn *scn = NULL;
  while ((scn = elf_nextscn(e, scn)) != NULL) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    const char *name = elf_strptr(e, shstrndx, sh.sh_name);
    if (!name || strcmp(name, NOTE_SECTION)) continue;
    if (sh.sh_type != SHT_NOTE) {
      snprintf(out->error, sizeof out->error, "section %s is not of type SHT_NOTE (type %u)", NOTE_SECTION, (unsigned)sh.sh_type);
      return -1;
    }
    Elf_Data *data = elf_getdata(scn, NULL);
    if (!data || !data->d_buf) {
      snprintf(out->error, sizeof out->error, "section %s has no readable data: %s", NOTE_SECTION, elf_errmsg(-1));
      return -1;
    }
    size_t off = 0, next, name_off, desc_off;
    GElf_Nhdr nh;
    while (off < data->d_size && (next = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
      const char *owner = (const char *)data->d_buf + name_off;
      size_t on = nh.n_namesz;
      while (on && owner[on - 1] == '\0') on--;
      if (on == strlen(NOTE_OWNER) && !memcmp(owner, NOTE_OWNER, on) && nh.n_descsz) {
        const char *desc = (const char *)data->d_buf + desc_off;
        size_t dn = nh.n_descsz;
        while (dn && desc[dn - 1] == '\0') dn--; /* the JSON may be NUL-padded */
        return gc_probe_fwd_note_json(desc, dn, out);
      }
      off = next;
    }
    snprintf(out->error, sizeof out->error, "section %s holds no note of \"%s\"", NOTE_SECTION, NOTE_OWNER);
    return -1;
  }
  return 0; /* no such section: not a compat library, or one from before the note existed */
}

int gc_probe_fwd_note_elf(const void *image, size_t size, gc_fwd_note *out) {
  reset(out);
  if (!image || !size) {
    snprintf(out->error, sizeof out->error, "empty file");
    return -1;
  }
  if (elf_version(EV_CURRENT) == EV_NONE) {
    snprintf(out->error, sizeof out->error, "libelf unusable: %s", elf_errmsg(-1));
    return -1;
  }
  /* libelf may convert in place; work on a private copy of the caller's bytes. */
  char *copy = malloc(size);
  if (!copy) {
    snprintf(out->error, sizeof out->error, "out of memory for %zu bytes", size);
    return -1;
  }
  memcpy(copy, image, size);
  Elf *e = elf_memory(copy, size);
  int rc;
  if (!e) {
    snprintf(out->error, sizeof out->error, "not an ELF file: %s", elf_errmsg(-1));
    rc = -1;
  } else {
    rc = from_elf(e, out);
    elf_end(e);
  }
  free(copy);
  return rc;
}

int gc_probe_fwd_note_file(const char *path, gc_fwd_note *out) {
  reset(out);
  if (elf_version(EV_CURRENT) == EV_NONE) {
    snprintf(out->error, sizeof out->error, "libelf unusable: %s", elf_errmsg(-1));
    return -1;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(out->error, sizeof out->error, "cannot open %s", path);
    return -1;
  }
  Elf *e = elf_begin(fd, ELF_C_READ, NULL);
  int rc;
  if (!e) {
    snprintf(out->error, sizeof out->error, "%s is not an ELF file: %s", path, elf_errmsg(-1));
    rc = -1;
  } else {
    rc = from_elf(e, out);
    elf_end(e);
  }
  close(fd);
  return rc;
}
