/*
 * A stand-in for an old rdma-core libibverbs: every entry point the plugin requires, exported at
 * IBVERBS_1.1 only (see old_verbs.map), and none of the later optional ones
 * (ibv_reg_mr_iova2@IBVERBS_1.8, ibv_reg_dmabuf_mr@IBVERBS_1.12). The device list is empty and
 * every other call fails, so a plugin that loads it must end up with "no usable RDMA device".
 * ibv_fork_init succeeds (it would on a real old rdma-core with no devices).
 * The verbs types are opaque here: no function dereferences its arguments.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

struct ibv_device;
struct ibv_context;
struct ibv_pd;
struct ibv_mr;
struct ibv_cq;
struct ibv_qp;

struct ibv_device **ibv_get_device_list(int *num) {
  struct ibv_device **list = calloc(1, sizeof *list);
  if (num != NULL) *num = 0;
  if (list == NULL) errno = ENOMEM;
  return list;
}

void ibv_free_device_list(struct ibv_device **list) { free(list); }

const char *ibv_get_device_name(struct ibv_device *dev) {
  (void)dev;
  errno = ENOSYS;
  return NULL;
}

struct ibv_context *ibv_open_device(struct ibv_device *dev) {
  (void)dev;
  errno = ENOSYS;
  return NULL;
}

int ibv_close_device(struct ibv_context *ctx) {
  (void)ctx;
  return ENOSYS;
}

int ibv_query_device(struct ibv_context *ctx, void *attr) {
  (void)ctx;
  (void)attr;
  return ENOSYS;
}

int ibv_query_port(struct ibv_context *ctx, uint8_t port, void *attr) {
  (void)ctx;
  (void)port;
  (void)attr;
  return ENOSYS;
}

int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, void *gid) {
  (void)ctx;
  (void)port;
  (void)index;
  (void)gid;
  errno = ENOSYS;
  return -1;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx) {
  (void)ctx;
  errno = ENOSYS;
  return NULL;
}

int ibv_dealloc_pd(struct ibv_pd *pd) {
  (void)pd;
  return ENOSYS;
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access) {
  (void)pd;
  (void)addr;
  (void)length;
  (void)access;
  errno = ENOSYS;
  return NULL;
}

int ibv_dereg_mr(struct ibv_mr *mr) {
  (void)mr;
  return ENOSYS;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context, void *channel,
                             int comp_vector) {
  (void)ctx;
  (void)cqe;
  (void)cq_context;
  (void)channel;
  (void)comp_vector;
  errno = ENOSYS;
  return NULL;
}

int ibv_destroy_cq(struct ibv_cq *cq) {
  (void)cq;
  return ENOSYS;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, void *attr) {
  (void)pd;
  (void)attr;
  errno = ENOSYS;
  return NULL;
}

int ibv_modify_qp(struct ibv_qp *qp, void *attr, int mask) {
  (void)qp;
  (void)attr;
  (void)mask;
  return ENOSYS;
}

int ibv_destroy_qp(struct ibv_qp *qp) {
  (void)qp;
  return ENOSYS;
}

int ibv_fork_init(void) { return 0; }

int ibv_get_async_event(struct ibv_context *ctx, void *event) {
  (void)ctx;
  (void)event;
  errno = ENOSYS;
  return -1;
}

void ibv_ack_async_event(void *event) { (void)event; }
