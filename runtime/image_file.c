/* Reading the embedded image table from a file with libelf (image_blob.h),
 * so tools can list a library's images without loading it. */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "image_blob.h"

static pthread_once_t elf_once = PTHREAD_ONCE_INIT;
static void elf_init(void) { elf_version(EV_CURRENT); }

/* Copies the bytes of section `name` out of an open ELF. */
static em_status copy_section(Elf *e, const char *path, const char *name, void **blob, size_t *size) {
  size_t shstrndx;
  if (elf_getshdrstrndx(e, &shstrndx) != 0)
    return em_fail(EM_ERR_CORRUPT, "%s: no section name table (%s)", path, elf_errmsg(-1));
  for (Elf_Scn *scn = elf_nextscn(e, NULL); scn; scn = elf_nextscn(e, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    const char *sname = elf_strptr(e, shstrndx, sh.sh_name);
    if (!sname || strcmp(sname, name)) continue;
    Elf_Data *d = elf_getdata(scn, NULL);
    if (!d || !d->d_buf || d->d_size == 0)
      return em_fail(EM_ERR_CORRUPT, "%s: section %s is empty or unreadable (%s)", path, name, elf_errmsg(-1));
    *blob = malloc(d->d_size);
    if (!*blob) return em_fail(EM_ERR_OUT_OF_MEMORY, "%s: no memory for %zu bytes of %s", path, d->d_size, name);
    memcpy(*blob, d->d_buf, d->d_size);
    *size = d->d_size;
    return EM_OK;
  }
  return em_fail(EM_ERR_NOT_FOUND, "%s has no %s section: it is not an Ember library", path, name);
}

em_status em_blob_read_file(const char *path, void **blob, size_t *size) {
  pthread_once(&elf_once, elf_init);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return em_fail(EM_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  Elf *e = elf_begin(fd, ELF_C_READ, NULL);
  em_status s;
  if (!e || elf_kind(e) != ELF_K_ELF)
    s = em_fail(EM_ERR_CORRUPT, "%s is not an ELF file (%s)", path, elf_errmsg(-1));
  else
    s = copy_section(e, path, EM_BLOB_SECTION, blob, size);
  if (e) elf_end(e);
  close(fd);
  return s;
}

/* ------------------------------------------------- public file table API --- */

struct em_image_table {
  void *blob;
  em_blob_view view;
};

__attribute__((visibility("default"))) em_status em_image_table_open(const char *path, em_image_table **out) {
  if (!path || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_image_table_open: path and out must not be NULL");
  em_image_table *t = calloc(1, sizeof *t);
  if (!t) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for an image table");
  size_t size = 0;
  em_status s = em_blob_read_file(path, &t->blob, &size);
  if (!s) s = em_blob_parse(t->blob, size, path, &t->view);
  if (s) {
    free(t->blob);
    free(t);
    return s;
  }
  *out = t;
  return EM_OK;
}

__attribute__((visibility("default"))) size_t em_image_table_count(const em_image_table *t) {
  return t ? t->view.count : 0;
}

__attribute__((visibility("default"))) em_status em_image_table_get(const em_image_table *t, size_t index,
                                                                   em_image_info *out) {
  if (!t || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_image_table_get: NULL argument");
  if (index >= t->view.count)
    return em_fail(EM_ERR_NOT_FOUND, "image %zu does not exist (the table has %zu)", index, t->view.count);
  *out = t->view.images[index];
  return EM_OK;
}

__attribute__((visibility("default"))) void em_image_table_close(em_image_table *t) {
  if (!t) return;
  em_blob_view_free(&t->view);
  free(t->blob);
  free(t);
}
