/* Tests of the caching allocator (runtime/memory.h).
 *
 * The allocator runs on a mock backend that hands out fake, never
 * dereferenced addresses (BASE + 512 * n, so each is unique for the whole
 * test), logs every call, checks that only its own live addresses come back
 * and can be told to fail. Expected numbers come from the header's rules
 * worked by hand in the comments (size classes: a multiple of 512, one of the
 * four steps p, 1.25p, 1.5p, 1.75p of a power of two p; a freed block is
 * reused for the same class; out of memory returns the cache and retries
 * once), and from a brute-force reference of the class rule below. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "memory.h"

/* ---- the mock backend --------------------------------------------------- */

#define BASE ((uintptr_t)0x7f0000000000ull)
#define SLOT 512u
#define MAX_SLOTS (1u << 18)
#define LOG_CAP 64

typedef enum { EV_ALLOC_OK, EV_ALLOC_FAIL, EV_RELEASE } ev_kind;
typedef struct { ev_kind kind; void *ptr; size_t bytes; } event;

typedef struct mock {
  pthread_mutex_t lock;   /* the allocator serialises calls; this keeps the mock honest anyway */
  uint8_t *live;          /* per slot: 1 while handed out and not released */
  size_t *size;           /* per slot: bytes asked for */
  size_t next_slot;
  size_t allocs, releases, failures;
  size_t bad_releases;    /* releases of an address not live in the mock */
  uint64_t live_bytes;
  uint64_t capacity;      /* alloc fails when live_bytes + bytes would exceed it */
  int fail_next;          /* fail this many calls whatever the capacity */
  event log[LOG_CAP];
  size_t n_log;
} mock;

#define MOCK_OOM 2 /* CUDA_ERROR_OUT_OF_MEMORY, as a real backend would return */

static void mock_note(mock *m, ev_kind k, void *p, size_t bytes) {
  if (m->n_log < LOG_CAP) m->log[m->n_log++] = (event){k, p, bytes};
}

static int mock_alloc(void *ctx, size_t bytes, void **ptr) {
  mock *m = ctx;
  pthread_mutex_lock(&m->lock);
  int fail = m->fail_next > 0 || m->live_bytes + bytes > m->capacity || m->next_slot == MAX_SLOTS;
  if (fail) {
    if (m->fail_next > 0) m->fail_next--;
    m->failures++;
    mock_note(m, EV_ALLOC_FAIL, NULL, bytes);
    pthread_mutex_unlock(&m->lock);
    return MOCK_OOM;
  }
  size_t s = m->next_slot++;
  m->live[s] = 1;
  m->size[s] = bytes;
  m->live_bytes += bytes;
  m->allocs++;
  *ptr = (void *)(BASE + (uintptr_t)s * SLOT);
  mock_note(m, EV_ALLOC_OK, *ptr, bytes);
  pthread_mutex_unlock(&m->lock);
  return 0;
}

static void mock_release(void *ctx, void *ptr) {
  mock *m = ctx;
  pthread_mutex_lock(&m->lock);
  uintptr_t a = (uintptr_t)ptr;
  size_t s = (size_t)((a - BASE) / SLOT);
  if (a < BASE || (a - BASE) % SLOT || s >= m->next_slot || !m->live[s]) {
    m->bad_releases++;
  } else {
    m->live[s] = 0;
    m->live_bytes -= m->size[s];
    m->releases++;
  }
  mock_note(m, EV_RELEASE, ptr, 0);
  pthread_mutex_unlock(&m->lock);
}

static mock *mock_new(uint64_t capacity) {
  mock *m = calloc(1, sizeof *m);
  m->live = calloc(MAX_SLOTS, 1);
  m->size = calloc(MAX_SLOTS, sizeof *m->size);
  assert_non_null(m->live);
  assert_non_null(m->size);
  pthread_mutex_init(&m->lock, NULL);
  m->capacity = capacity;
  return m;
}

static void mock_free(mock *m) {
  pthread_mutex_destroy(&m->lock);
  free(m->live);
  free(m->size);
  free(m);
}

/* A fixture: an allocator on a fresh mock. */
typedef struct fixture {
  mock *m;
  em_allocator a;
} fixture;

static fixture *fixture_limited(int caching, uint64_t capacity, size_t cache_limit) {
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->m = mock_new(capacity);
  em_allocator_init(&f->a, (em_alloc_backend){mock_alloc, mock_release, f->m, caching, cache_limit, 0});
  return f;
}

static fixture *fixture_new(int caching, uint64_t capacity) { return fixture_limited(caching, capacity, 0); }

/* Destroying returns the cache: afterwards the mock holds exactly the blocks
 * still live in the allocator, and nothing was ever released twice. */
static void fixture_free(fixture *f) {
  uint64_t in_use = f->a.stats.bytes_in_use;
  em_allocator_destroy(&f->a);
  assert_int_equal(f->m->bad_releases, 0);
  assert_int_equal(f->m->live_bytes, in_use);
  mock_free(f->m);
  free(f);
}

static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* ---- size classes ------------------------------------------------------- */

/* The class rule of memory.h, by brute force: the smallest value >= bytes
 * that is a multiple of 512 and equals p + k*p/4 (k = 0..3) for some power of
 * two p >= 512. Below 2048 the quarter steps of an octave are not multiples
 * of 512, so only 512, 1024, 1536, 2048 qualify there. */
static size_t ref_class(size_t bytes) {
  size_t best = 0;
  for (size_t p = 512; p && p <= ((size_t)1 << 62); p <<= 1)
    for (size_t k = 0; k < 4; k++) {
      size_t c = p + k * (p / 4);
      if (c % 512 == 0 && c >= bytes && (!best || c < best)) best = c;
    }
  return best;
}

static void test_class_by_hand(void **state) {
  (void)state;
  assert_int_equal(em_alloc_class(1), 512);
  assert_int_equal(em_alloc_class(511), 512);
  assert_int_equal(em_alloc_class(512), 512);
  assert_int_equal(em_alloc_class(513), 1024);  /* 640, 768, 896 are not multiples of 512 */
  assert_int_equal(em_alloc_class(1024), 1024);
  assert_int_equal(em_alloc_class(1025), 1536); /* 1.5 * 1024 */
  assert_int_equal(em_alloc_class(1537), 2048); /* 1792 = 1.75 * 1024 is not a multiple of 512 */
  assert_int_equal(em_alloc_class(2049), 2560); /* 1.25 * 2048 */
  assert_int_equal(em_alloc_class(3585), 4096);
  assert_int_equal(em_alloc_class(4096), 4096);
  assert_int_equal(em_alloc_class(4097), 5120); /* 1.25 * 4096 */
  assert_int_equal(em_alloc_class(5121), 6144);
  assert_int_equal(em_alloc_class(6145), 7168);
  assert_int_equal(em_alloc_class(7169), 8192);
  assert_int_equal(em_alloc_class(1000000), 1048576);       /* 917504 = 1.75 * 2^19 < 1e6 */
  assert_int_equal(em_alloc_class(1048577), 1310720);       /* 1.25 MiB */
  assert_int_equal(em_alloc_class((size_t)3 << 30), (size_t)3 << 30); /* 1.5 * 2 GiB */
  /* Zero bytes still takes the smallest class, so every pointer is distinct. */
  assert_int_equal(em_alloc_class(0), 512);
}

static void test_class_sweep_against_reference(void **state) {
  (void)state;
  /* Every size up to 64 KiB, then a pseudo-random sample up to 2^40. */
  for (size_t b = 1; b <= 65536; b++) {
    size_t c = em_alloc_class(b);
    if (c != ref_class(b)) fail_msg("em_alloc_class(%zu) = %zu, expected %zu", b, c, ref_class(b));
  }
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 200000; i++) {
    unsigned shift = 24 + (unsigned)(xorshift(&s) % 40);
    size_t b = (size_t)(xorshift(&s) >> shift) + 1;
    size_t c = em_alloc_class(b);
    if (c != ref_class(b)) fail_msg("em_alloc_class(%zu) = %zu, expected %zu", b, c, ref_class(b));
  }
}

/* The class is never smaller than the request, always a multiple of 512, and
 * above 4096 wastes at most 25% of the request (the header's promise; it
 * cannot hold below 2048, where 513 bytes take 1024). */
static void test_class_waste_bound(void **state) {
  (void)state;
  uint64_t s = 12345;
  for (int i = 0; i < 400000; i++) {
    size_t b = i < 200000 ? (size_t)4097 + (size_t)i * 37 : (size_t)(xorshift(&s) >> (20 + i % 30)) + 4097;
    size_t c = em_alloc_class(b);
    if (c < b) fail_msg("class %zu of %zu is smaller than the request", c, b);
    if (c % 512) fail_msg("class %zu of %zu is not a multiple of 512", c, b);
    if ((double)(c - b) > 0.25 * (double)b) fail_msg("class %zu of %zu wastes more than 25%%", c, b);
  }
  for (size_t b = 1; b <= 4096; b++) assert_true(em_alloc_class(b) >= b);
}

/* A size so large that no class holds it is refused before the backend is
 * asked, with a message. */
static void test_too_large_is_refused(void **state) {
  (void)state;
  fixture *f = fixture_new(1, UINT64_MAX);
  void *p = NULL;
  em_clear_error();
  assert_int_equal(em_allocator_alloc(&f->a, SIZE_MAX, &p), EM_ERR_OUT_OF_MEMORY);
  assert_int_equal(em_allocator_alloc(&f->a, SIZE_MAX - 100, &p), EM_ERR_OUT_OF_MEMORY);
  /* Just above 1.75 * 2^63 the next step would be 2^64: no class exists, and
   * the allocator must not invent one that is not a step (the mock would
   * grant it: its capacity is unlimited). */
  assert_int_equal(em_allocator_alloc(&f->a, (size_t)0xE000000000000001ull, &p), EM_ERR_OUT_OF_MEMORY);
  /* Exactly 1.75 * 2^63 is still a class. */
  assert_int_equal(em_alloc_class((size_t)0xE000000000000000ull), (size_t)0xE000000000000000ull);
  assert_true(strlen(em_last_error()) > 0);
  assert_int_equal(f->m->allocs, 0);
  assert_int_equal(f->a.stats.bytes_in_use, 0);
  fixture_free(f);
}

/* ---- caching and statistics ------------------------------------------- */

static void test_freed_block_is_reused_for_its_class(void **state) {
  (void)state;
  fixture *f = fixture_new(1, UINT64_MAX);
  void *p, *q, *r;
  assert_int_equal(em_allocator_alloc(&f->a, 5000, &p), EM_OK); /* class 5120 */
  assert_int_equal(f->m->allocs, 1);
  assert_int_equal(f->m->log[0].bytes, 5120);                    /* the backend is asked for the class */
  assert_int_equal(em_allocator_free(&f->a, p), EM_OK);
  assert_int_equal(f->m->releases, 0);                           /* kept, not returned */
  /* 4097 is also class 5120: the same block comes back, no backend call. */
  assert_int_equal(em_allocator_alloc(&f->a, 4097, &q), EM_OK);
  assert_ptr_equal(q, p);
  assert_int_equal(f->m->allocs, 1);
  assert_int_equal(f->a.stats.cache_hits, 1);
  assert_int_equal(em_allocator_free(&f->a, q), EM_OK);
  /* 4096 is class 4096: the cached 5120 block does not serve it. */
  assert_int_equal(em_allocator_alloc(&f->a, 4096, &r), EM_OK);
  assert_ptr_not_equal(r, p);
  assert_int_equal(f->m->allocs, 2);
  assert_int_equal(f->a.stats.cache_hits, 1);
  assert_int_equal(em_allocator_free(&f->a, r), EM_OK);
  fixture_free(f);
}

static void assert_stats(const em_alloc_stats *s, uint64_t in_use, uint64_t cached, uint64_t peak,
                         uint64_t device_allocs, uint64_t hits) {
  assert_int_equal(s->bytes_in_use, in_use);
  assert_int_equal(s->bytes_cached, cached);
  assert_int_equal(s->peak_bytes_in_use, peak);
  assert_int_equal(s->device_allocs, device_allocs);
  assert_int_equal(s->cache_hits, hits);
}

static void test_stats_by_hand(void **state) {
  (void)state;
  fixture *f = fixture_new(1, UINT64_MAX);
  em_alloc_stats *s = &f->a.stats;
  void *a, *b, *c, *d, *e;
  assert_stats(s, 0, 0, 0, 0, 0);
  assert_int_equal(em_allocator_alloc(&f->a, 1000, &a), EM_OK); /* 1024 */
  assert_int_equal(em_allocator_alloc(&f->a, 5000, &b), EM_OK); /* 5120 */
  assert_int_equal(em_allocator_alloc(&f->a, 100, &c), EM_OK);  /* 512 */
  assert_stats(s, 1024 + 5120 + 512, 0, 6656, 3, 0);
  assert_int_equal(em_allocator_free(&f->a, b), EM_OK);
  assert_stats(s, 1536, 5120, 6656, 3, 0);
  assert_int_equal(em_allocator_alloc(&f->a, 4500, &d), EM_OK); /* 5120: the cached b */
  assert_ptr_equal(d, b);
  assert_stats(s, 6656, 0, 6656, 3, 1);
  assert_int_equal(em_allocator_alloc(&f->a, 4097, &e), EM_OK); /* 5120 again: nothing cached */
  assert_stats(s, 11776, 0, 11776, 4, 1);
  assert_int_equal(em_allocator_free(&f->a, a), EM_OK);
  assert_int_equal(em_allocator_free(&f->a, d), EM_OK);
  assert_stats(s, 11776 - 1024 - 5120, 1024 + 5120, 11776, 4, 1);
  assert_int_equal(em_allocator_free(&f->a, c), EM_OK);
  assert_int_equal(em_allocator_free(&f->a, e), EM_OK);
  assert_stats(s, 0, 11776, 11776, 4, 1);
  assert_int_equal(f->m->live_bytes, 11776); /* the cache is what the backend still holds */
  assert_int_equal(f->m->releases, 0);
  fixture_free(f);
}

static void test_bad_free_is_an_invalid_argument(void **state) {
  (void)state;
  fixture *f = fixture_new(1, UINT64_MAX);
  void *p, *q;
  int on_stack;
  em_clear_error();
  assert_int_equal(em_allocator_free(&f->a, &on_stack), EM_ERR_INVALID_ARGUMENT);
  assert_true(strlen(em_last_error()) > 0);
  assert_int_equal(em_allocator_alloc(&f->a, 600, &p), EM_OK);
  /* An address inside a live block is not a block. */
  em_clear_error();
  assert_int_equal(em_allocator_free(&f->a, (char *)p + 512), EM_ERR_INVALID_ARGUMENT);
  assert_true(strlen(em_last_error()) > 0);
  assert_int_equal(f->a.stats.bytes_in_use, 1024);
  assert_int_equal(em_allocator_free(&f->a, p), EM_OK);
  em_clear_error();
  assert_int_equal(em_allocator_free(&f->a, p), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "twice"));
  /* The double free did not put the block in the cache twice. */
  assert_int_equal(f->a.stats.bytes_cached, 1024);
  assert_int_equal(f->a.stats.bytes_in_use, 0);
  assert_int_equal(em_allocator_alloc(&f->a, 1024, &p), EM_OK);
  assert_int_equal(em_allocator_alloc(&f->a, 1024, &q), EM_OK);
  assert_ptr_not_equal(p, q);
  assert_int_equal(em_allocator_free(&f->a, p), EM_OK);
  assert_int_equal(em_allocator_free(&f->a, q), EM_OK);
  /* free(NULL) does nothing, as with free(3). */
  assert_int_equal(em_allocator_free(&f->a, NULL), EM_OK);
  fixture_free(f);
}

/* ---- out of memory ------------------------------------------------------ */

/* The backend holds 8192 bytes. Two 2048 blocks and one 4096 block are cached;
 * asking for 6144 fails, the allocator returns all three cached blocks and the
 * retry succeeds. The log must read: fail, release x3, alloc. */
static void test_oom_releases_cache_then_retries_once(void **state) {
  (void)state;
  fixture *f = fixture_new(1, 8192);
  void *a, *b, *c, *d;
  assert_int_equal(em_allocator_alloc(&f->a, 2048, &a), EM_OK);
  assert_int_equal(em_allocator_alloc(&f->a, 2048, &b), EM_OK);
  assert_int_equal(em_allocator_alloc(&f->a, 4096, &c), EM_OK);
  assert_int_equal(em_allocator_free(&f->a, a), EM_OK);
  assert_int_equal(em_allocator_free(&f->a, b), EM_OK);
  assert_int_equal(em_allocator_free(&f->a, c), EM_OK);
  assert_int_equal(f->a.stats.bytes_cached, 8192);
  size_t mark = f->m->n_log;
  assert_int_equal(em_allocator_alloc(&f->a, 6000, &d), EM_OK); /* class 6144 */
  assert_int_equal(f->m->n_log - mark, 5);
  assert_int_equal(f->m->log[mark].kind, EV_ALLOC_FAIL);
  assert_int_equal(f->m->log[mark].bytes, 6144);
  void *released[3];
  for (int i = 0; i < 3; i++) {
    assert_int_equal(f->m->log[mark + 1 + i].kind, EV_RELEASE);
    released[i] = f->m->log[mark + 1 + i].ptr;
  }
  /* Each cached block released exactly once, in any order. */
  void *want[3] = {a, b, c};
  for (int w = 0; w < 3; w++) {
    int seen = 0;
    for (int i = 0; i < 3; i++) seen += released[i] == want[w];
    assert_int_equal(seen, 1);
  }
  assert_int_equal(f->m->log[mark + 4].kind, EV_ALLOC_OK);
  assert_int_equal(f->m->log[mark + 4].bytes, 6144);
  assert_ptr_equal(f->m->log[mark + 4].ptr, d);
  assert_stats(&f->a.stats, 6144, 0, 8192, 4, 0);
  assert_int_equal(em_allocator_free(&f->a, d), EM_OK);
  fixture_free(f);
}

/* When the retry fails too the caller gets EM_ERR_OUT_OF_MEMORY, the cache
 * is gone (returned to the backend), and the live blocks are untouched. */
static void test_oom_retry_fails(void **state) {
  (void)state;
  fixture *f = fixture_new(1, UINT64_MAX);
  void *live, *cached, *p = NULL;
  assert_int_equal(em_allocator_alloc(&f->a, 512, &live), EM_OK);
  assert_int_equal(em_allocator_alloc(&f->a, 512, &cached), EM_OK);
  assert_int_equal(em_allocator_free(&f->a, cached), EM_OK);
  f->m->fail_next = 2;
  size_t mark = f->m->n_log;
  em_clear_error();
  assert_int_equal(em_allocator_alloc(&f->a, 4096, &p), EM_ERR_OUT_OF_MEMORY);
  assert_true(strlen(em_last_error()) > 0);
  assert_int_equal(f->m->n_log - mark, 3); /* fail, release, fail: exactly one retry */
  assert_int_equal(f->m->log[mark].kind, EV_ALLOC_FAIL);
  assert_int_equal(f->m->log[mark + 1].kind, EV_RELEASE);
  assert_ptr_equal(f->m->log[mark + 1].ptr, cached);
  assert_int_equal(f->m->log[mark + 2].kind, EV_ALLOC_FAIL);
  assert_stats(&f->a.stats, 512, 0, 1024, 2, 0);
  assert_int_equal(em_allocator_free(&f->a, live), EM_OK);
  fixture_free(f);
}

/* With nothing cached there is nothing to return: one backend call, then
 * EM_ERR_OUT_OF_MEMORY with a message naming the size. */
static void test_oom_without_cache(void **state) {
  (void)state;
  fixture *f = fixture_new(1, 4096);
  void *a, *p = NULL;
  assert_int_equal(em_allocator_alloc(&f->a, 4096, &a), EM_OK);
  size_t mark = f->m->n_log;
  em_clear_error();
  assert_int_equal(em_allocator_alloc(&f->a, 1000, &p), EM_ERR_OUT_OF_MEMORY);
  assert_int_equal(f->m->n_log - mark, 1);
  assert_int_equal(f->m->log[mark].kind, EV_ALLOC_FAIL);
  assert_non_null(strstr(em_last_error(), "1000"));
  assert_stats(&f->a.stats, 4096, 0, 4096, 1, 0);
  assert_int_equal(em_allocator_free(&f->a, a), EM_OK);
  fixture_free(f);
}

/* ---- trim, destroy, non-caching backends ---------------------------------- */

static void test_trim_releases_every_cached_block(void **state) {
  (void)state;
  fixture *f = fixture_new(1, UINT64_MAX);
  void *p[6];
  /* classes 512 1024 2048 5120 5120 114688 (100000 -> 1.75 * 65536) */
  size_t sizes[6] = {1, 600, 2000, 5000, 5000, 100000};
  for (int i = 0; i < 6; i++) assert_int_equal(em_allocator_alloc(&f->a, sizes[i], &p[i]), EM_OK);
  for (int i = 1; i < 6; i++) assert_int_equal(em_allocator_free(&f->a, p[i]), EM_OK);
  assert_int_equal(f->a.stats.bytes_cached, 1024 + 2048 + 5120 + 5120 + 114688);
  em_allocator_trim(&f->a);
  assert_int_equal(f->m->releases, 5);
  assert_int_equal(f->m->live_bytes, 512); /* only the live block p[0] */
  assert_int_equal(f->a.stats.bytes_cached, 0);
  assert_int_equal(f->a.stats.bytes_in_use, 512);
  /* After a trim the next request goes to the backend again. */
  void *q;
  assert_int_equal(em_allocator_alloc(&f->a, 5000, &q), EM_OK);
  assert_int_equal(f->a.stats.device_allocs, 7);
  assert_int_equal(f->a.stats.cache_hits, 0);
  em_allocator_trim(&f->a); /* nothing cached: nothing released */
  assert_int_equal(f->m->releases, 5);
  assert_int_equal(em_allocator_free(&f->a, q), EM_OK);
  assert_int_equal(em_allocator_free(&f->a, p[0]), EM_OK);
  fixture_free(f);
}

/* Destroy returns the cache and leaves live blocks to the backend. */
static void test_destroy_releases_cache_only(void **state) {
  (void)state;
  fixture *f = fixture_new(1, UINT64_MAX);
  void *live, *cached;
  assert_int_equal(em_allocator_alloc(&f->a, 700, &live), EM_OK);
  assert_int_equal(em_allocator_alloc(&f->a, 9000, &cached), EM_OK);
  assert_int_equal(em_allocator_free(&f->a, cached), EM_OK);
  mock *m = f->m;
  em_allocator_destroy(&f->a);
  assert_int_equal(m->releases, 1);
  assert_int_equal(m->live_bytes, 1024);
  assert_int_equal(m->bad_releases, 0);
  mock_free(m);
  free(f);
}

static void test_non_caching_backend_releases_at_once(void **state) {
  (void)state;
  fixture *f = fixture_new(0, UINT64_MAX);
  void *p, *q;
  assert_int_equal(em_allocator_alloc(&f->a, 3000, &p), EM_OK); /* 3072 */
  assert_int_equal(em_allocator_free(&f->a, p), EM_OK);
  assert_int_equal(f->m->releases, 1);
  assert_int_equal(f->m->live_bytes, 0);
  assert_int_equal(em_allocator_alloc(&f->a, 3000, &q), EM_OK);
  assert_int_equal(f->m->allocs, 2);
  assert_stats(&f->a.stats, 3072, 0, 3072, 2, 0);
  assert_int_equal(em_allocator_free(&f->a, q), EM_OK);
  assert_int_equal(em_allocator_free(&f->a, q), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(f->m->bad_releases, 0);
  fixture_free(f);
}

/* A cache limit of 5120 bytes: freeing 3072 then 3072 caches the first and
 * releases the second at once (3072 + 3072 > 5120); a 2048 block still fits. */
static void test_cache_limit_releases_beyond_it(void **state) {
  (void)state;
  fixture *f = fixture_limited(1, UINT64_MAX, 5120);
  void *p, *q, *r;
  assert_int_equal(em_allocator_alloc(&f->a, 3000, &p), EM_OK); /* 3072 */
  assert_int_equal(em_allocator_alloc(&f->a, 3000, &q), EM_OK);
  assert_int_equal(em_allocator_alloc(&f->a, 2000, &r), EM_OK); /* 2048 */
  assert_int_equal(em_allocator_free(&f->a, p), EM_OK);
  assert_int_equal(f->m->releases, 0);
  assert_int_equal(em_allocator_free(&f->a, q), EM_OK);
  assert_int_equal(f->m->releases, 1);
  assert_int_equal(em_allocator_free(&f->a, r), EM_OK);
  assert_int_equal(f->m->releases, 1);
  assert_int_equal(f->a.stats.bytes_cached, 3072 + 2048);
  fixture_free(f);
}

/* ---- the live-block table ------------------------------------------------- */

/* 10,000 live blocks, freed in random order: every free finds its block
 * (right size back in the stats), a second free of any of them fails, and
 * blocks still live stay findable while others are deleted around them. The
 * backend does not cache, so every free is visible to the mock. */
static void test_many_blocks_random_order(void **state) {
  (void)state;
  enum { N = 10000 };
  fixture *f = fixture_new(0, UINT64_MAX);
  void **p = malloc(N * sizeof *p);
  size_t *cls = malloc(N * sizeof *cls);
  size_t *order = malloc(N * sizeof *order);
  assert_non_null(p);
  assert_non_null(cls);
  assert_non_null(order);
  uint64_t s = 42, total = 0;
  for (size_t i = 0; i < N; i++) {
    size_t bytes = 1 + xorshift(&s) % 20000;
    cls[i] = ref_class(bytes);
    total += cls[i];
    assert_int_equal(em_allocator_alloc(&f->a, bytes, &p[i]), EM_OK);
    order[i] = i;
  }
  assert_int_equal(f->a.stats.bytes_in_use, total);
  for (size_t i = N - 1; i > 0; i--) { /* Fisher-Yates */
    size_t j = xorshift(&s) % (i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (size_t k = 0; k < N; k++) {
    size_t i = order[k];
    uint64_t before = f->a.stats.bytes_in_use;
    assert_int_equal(em_allocator_free(&f->a, p[i]), EM_OK);
    assert_int_equal(before - f->a.stats.bytes_in_use, cls[i]);
    if (k % 7 == 0) assert_int_equal(em_allocator_free(&f->a, p[i]), EM_ERR_INVALID_ARGUMENT);
    /* Interleave fresh allocations so inserts land in holes deletions made. */
    if (k % 5 == 0) {
      void *t;
      assert_int_equal(em_allocator_alloc(&f->a, 700, &t), EM_OK);
      assert_int_equal(em_allocator_free(&f->a, t), EM_OK);
    }
  }
  assert_int_equal(f->a.stats.bytes_in_use, 0);
  assert_int_equal(f->m->releases, f->m->allocs);
  for (size_t i = 0; i < N; i++) assert_int_equal(em_allocator_free(&f->a, p[i]), EM_ERR_INVALID_ARGUMENT);
  free(p);
  free(cls);
  free(order);
  fixture_free(f);
}

/* A random walk of allocations and frees against a plain model (the list of
 * live blocks); with caching on, so cached blocks come back through the
 * table too. */
static void test_random_walk_against_model(void **state) {
  (void)state;
  enum { STEPS = 60000, MAXLIVE = 3000 };
  fixture *f = fixture_new(1, UINT64_MAX);
  void **live = malloc(MAXLIVE * sizeof *live);
  size_t *lcls = malloc(MAXLIVE * sizeof *lcls);
  size_t n = 0;
  uint64_t s = 7, in_use = 0, peak = 0, allocs = 0;
  for (int step = 0; step < STEPS; step++) {
    int do_alloc = n == 0 || (n < MAXLIVE && xorshift(&s) % 100 < (step < STEPS / 2 ? 60 : 40));
    if (do_alloc) {
      size_t bytes = 1 + xorshift(&s) % 9000;
      void *p;
      assert_int_equal(em_allocator_alloc(&f->a, bytes, &p), EM_OK);
      for (size_t i = 0; i < n; i++)
        if (live[i] == p) fail_msg("block %p handed out twice", p);
      live[n] = p;
      lcls[n++] = ref_class(bytes);
      in_use += ref_class(bytes);
      if (in_use > peak) peak = in_use;
      allocs++;
    } else {
      size_t i = xorshift(&s) % n;
      assert_int_equal(em_allocator_free(&f->a, live[i]), EM_OK);
      in_use -= lcls[i];
      live[i] = live[--n];
      lcls[i] = lcls[n];
    }
    assert_int_equal(f->a.stats.bytes_in_use, in_use);
  }
  assert_int_equal(f->a.stats.peak_bytes_in_use, peak);
  assert_int_equal(f->a.stats.device_allocs + f->a.stats.cache_hits, allocs);
  /* What the backend holds = in use + cached. */
  assert_int_equal(f->m->live_bytes, f->a.stats.bytes_in_use + f->a.stats.bytes_cached);
  while (n) assert_int_equal(em_allocator_free(&f->a, live[--n]), EM_OK);
  free(live);
  free(lcls);
  fixture_free(f);
}

/* ---- threads -------------------------------------------------------------- */

enum { THREADS = 4, ITERS = 500000, HOLD = 16 };

typedef struct worker {
  em_allocator *a;
  atomic_uchar *owned; /* per mock slot: 1 while a thread holds the block */
  pthread_barrier_t *start;
  uint64_t seed;
  uint64_t allocs;
  int errors;
} worker;

static atomic_uchar *owned_flag(atomic_uchar *owned, void *p) {
  return &owned[((uintptr_t)p - BASE) / SLOT];
}

static void *worker_main(void *arg) {
  worker *w = arg;
  void *held[HOLD] = {0};
  static const size_t sizes[] = {100, 1000, 3000, 5000, 70000};
  pthread_barrier_wait(w->start); /* all threads at once, so they really contend */
  for (int i = 0; i < ITERS; i++) {
    int k = (int)(xorshift(&w->seed) % HOLD);
    if (held[k]) {
      atomic_store(owned_flag(w->owned, held[k]), 0);
      if (em_allocator_free(w->a, held[k]) != EM_OK) w->errors++;
      held[k] = NULL;
    } else {
      void *p;
      if (em_allocator_alloc(w->a, sizes[xorshift(&w->seed) % 5], &p) != EM_OK) {
        w->errors++;
        continue;
      }
      /* No other thread may hold this block right now. */
      if (atomic_exchange(owned_flag(w->owned, p), 1)) w->errors++;
      held[k] = p;
      w->allocs++;
    }
  }
  for (int k = 0; k < HOLD; k++)
    if (held[k]) {
      atomic_store(owned_flag(w->owned, held[k]), 0);
      if (em_allocator_free(w->a, held[k]) != EM_OK) w->errors++;
    }
  return NULL;
}

static void test_threads_keep_totals_consistent(void **state) {
  (void)state;
  fixture *f = fixture_new(1, UINT64_MAX);
  atomic_uchar *owned = calloc(MAX_SLOTS, sizeof *owned);
  assert_non_null(owned);
  worker w[THREADS];
  pthread_t t[THREADS];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, THREADS);
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){&f->a, owned, &start, 0x1234567ull * (uint64_t)(i + 1), 0, 0};
    assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
  }
  uint64_t allocs = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(w[i].errors, 0);
    allocs += w[i].allocs;
  }
  pthread_barrier_destroy(&start);
  const em_alloc_stats *s = &f->a.stats;
  assert_int_equal(s->bytes_in_use, 0);
  assert_int_equal(s->device_allocs + s->cache_hits, allocs);
  assert_int_equal(s->device_allocs, f->m->allocs);
  assert_int_equal(s->bytes_cached, f->m->live_bytes);
  assert_int_equal(f->m->releases, 0);
  /* At most THREADS * HOLD blocks live at once, each of class <= 81920 (70000 -> 1.25 * 65536). */
  assert_true(s->peak_bytes_in_use <= (uint64_t)THREADS * HOLD * 81920);
  assert_true(s->peak_bytes_in_use > 0);
  free(owned);
  fixture_free(f);
}

/* A stream-aware allocator (a CUDA device's) hands a cached block only to a
 * request made under the stream it was freed under (em_alloc_stream): work
 * queued on that stream may still read it. A plain one ignores streams. */
static void test_cache_is_per_stream(void **state) {
  (void)state;
  for (int aware = 0; aware <= 1; aware++) {
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->m = mock_new(1 << 20);
    em_allocator_init(&f->a, (em_alloc_backend){mock_alloc, mock_release, f->m, 1, 0, aware});
    int s1, s2; /* two streams' identities */
    void *p, *q, *r;
    assert_null(em_alloc_stream(&s1));
    assert_int_equal(em_allocator_alloc(&f->a, 1000, &p), EM_OK);
    assert_int_equal(em_allocator_free(&f->a, p), EM_OK); /* cached under s1 */
    assert_ptr_equal(em_alloc_stream(&s2), &s1);
    assert_int_equal(em_allocator_alloc(&f->a, 1000, &q), EM_OK);
    if (aware) assert_ptr_not_equal(q, p); /* s2 must not take s1's block */
    else assert_ptr_equal(q, p);
    em_alloc_stream(NULL);
    assert_int_equal(em_allocator_alloc(&f->a, 1000, &r), EM_OK);
    if (aware) assert_ptr_not_equal(r, p); /* nor the legacy stream */
    em_alloc_stream(&s1);
    void *t;
    assert_int_equal(em_allocator_alloc(&f->a, 1000, &t), EM_OK);
    assert_ptr_equal(t, aware ? p : t); /* s1 takes its own block back */
    em_alloc_stream(NULL);
    assert_int_equal(em_allocator_free(&f->a, q), EM_OK);
    assert_int_equal(em_allocator_free(&f->a, r), EM_OK);
    assert_int_equal(em_allocator_free(&f->a, t), EM_OK);
    fixture_free(f);
  }
}

/* A stream's end (em_allocator_retire_stream): its cached blocks go to the legacy stream's side,
 * so the legacy stream (which waits for the ended stream) takes them, and a NEW stream given
 * the old one's identity (its address reused) does not. Retiring another stream, or none,
 * moves nothing. */
static void test_retired_stream_blocks_go_to_legacy(void **state) {
  (void)state;
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->m = mock_new(1 << 20);
  em_allocator_init(&f->a, (em_alloc_backend){mock_alloc, mock_release, f->m, 1, 0, 1});
  int s1, s2;
  void *p, *q, *r;
  em_alloc_stream(&s1);
  assert_int_equal(em_allocator_alloc(&f->a, 1000, &p), EM_OK);
  assert_int_equal(em_allocator_free(&f->a, p), EM_OK); /* cached under s1 */
  em_alloc_stream(NULL);
  em_allocator_retire_stream(&f->a, &s2); /* another stream: nothing moves */
  em_allocator_retire_stream(&f->a, NULL);
  em_alloc_stream(&s1);
  assert_int_equal(em_allocator_alloc(&f->a, 1000, &q), EM_OK);
  assert_ptr_equal(q, p); /* still s1's */
  assert_int_equal(em_allocator_free(&f->a, q), EM_OK);
  em_alloc_stream(NULL);
  em_allocator_retire_stream(&f->a, &s1);
  em_alloc_stream(&s1); /* a new stream at the old one's address */
  assert_int_equal(em_allocator_alloc(&f->a, 1000, &q), EM_OK);
  assert_ptr_not_equal(q, p);
  em_alloc_stream(NULL);
  assert_int_equal(em_allocator_alloc(&f->a, 1000, &r), EM_OK);
  assert_ptr_equal(r, p); /* the legacy stream takes it */
  assert_int_equal(em_allocator_free(&f->a, q), EM_OK);
  assert_int_equal(em_allocator_free(&f->a, r), EM_OK);
  fixture_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_class_by_hand),
      cmocka_unit_test(test_class_sweep_against_reference),
      cmocka_unit_test(test_class_waste_bound),
      cmocka_unit_test(test_too_large_is_refused),
      cmocka_unit_test(test_freed_block_is_reused_for_its_class),
      cmocka_unit_test(test_cache_is_per_stream),
      cmocka_unit_test(test_retired_stream_blocks_go_to_legacy),
      cmocka_unit_test(test_stats_by_hand),
      cmocka_unit_test(test_bad_free_is_an_invalid_argument),
      cmocka_unit_test(test_oom_releases_cache_then_retries_once),
      cmocka_unit_test(test_oom_retry_fails),
      cmocka_unit_test(test_oom_without_cache),
      cmocka_unit_test(test_trim_releases_every_cached_block),
      cmocka_unit_test(test_destroy_releases_cache_only),
      cmocka_unit_test(test_non_caching_backend_releases_at_once),
      cmocka_unit_test(test_cache_limit_releases_beyond_it),
      cmocka_unit_test(test_many_blocks_random_order),
      cmocka_unit_test(test_random_walk_against_model),
      cmocka_unit_test(test_threads_keep_totals_consistent),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
