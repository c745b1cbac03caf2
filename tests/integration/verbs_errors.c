/* What mrc0 refuses, tried by a program written against <infiniband/verbs.h>
 * alone (tests/integration/test_verbs.py runs it under `mrc verbs run` in a
 * fabric host): each case prints "name errno" on a line, 0 for success. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SAY(name, err) printf("%s %d\n", name, err)

int main(void)
{
    int n;
    struct ibv_device **list = ibv_get_device_list(&n), *d = NULL;
    for (int i = 0; list && i < n; i++)
        if (!strcmp(ibv_get_device_name(list[i]), "mrc0"))
            d = list[i];
    if (!d) {
        SAY("no_mrc0", ENODEV);
        return 1;
    }
    struct ibv_context *ctx = ibv_open_device(d);
    if (!ctx) {
        SAY("open", errno);
        return 1;
    }
    struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
    static char buf[1 << 16], other[4096];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_mr *mr2 = ibv_reg_mr(pd2, other, sizeof(other), IBV_ACCESS_LOCAL_WRITE);
    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, ch, 0);
    struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
                                  .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
    struct ibv_qp *qp = ibv_create_qp(pd, &qa);
    SAY("ud_qp", qp ? 0 : errno);
    qa.qp_type = IBV_QPT_UC;
    qp = ibv_create_qp(pd, &qa);
    SAY("uc_qp", qp ? 0 : errno);
    struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};
    SAY("srq", ibv_create_srq(pd, &sa) ? 0 : errno);
    struct ibv_ah_attr aa = {.port_num = 1};
    SAY("ah", ibv_create_ah(pd, &aa) ? 0 : errno);
    qa.qp_type = IBV_QPT_RC;
    qp = ibv_create_qp(pd, &qa);
    SAY("rc_qp", qp ? 0 : errno);
    if (!qp)
        return 1;
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
    struct ibv_send_wr w = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                            .send_flags = IBV_SEND_SIGNALED, .wr = {.rdma = {.remote_addr = 0, .rkey = 1}}};
    struct ibv_send_wr *bad = NULL;
    SAY("post_in_reset", ibv_post_send(qp, &w, &bad));
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    SAY("init", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX));
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.dest_qp_num = 0x123;
    a.rq_psn = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    memset(a.ah_attr.grh.dgid.raw, 0xAB, 16); /* names no host of the topology */
    int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU;
    SAY("rtr_unknown_gid", ibv_modify_qp(qp, &a, rtr));
    SAY("rtr_missing_attrs", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV));
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 0, &gid); /* our own host: a QP may loop back */
    a.ah_attr.grh.dgid = gid;
    a.dest_qp_num = qp->qp_num;
    SAY("rtr", ibv_modify_qp(qp, &a, rtr));
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 1;
    SAY("rts", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
    w.opcode = IBV_WR_SEND;
    bad = NULL;
    SAY("send_opcode", ibv_post_send(qp, &w, &bad));
    SAY("send_bad_wr", bad == &w ? 0 : 1);
    w.opcode = IBV_WR_RDMA_READ;
    SAY("read_opcode", ibv_post_send(qp, &w, &bad));
    w.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    SAY("atomic_opcode", ibv_post_send(qp, &w, &bad));
    w.opcode = IBV_WR_RDMA_WRITE;
    struct ibv_sge foreign = {.addr = (uintptr_t)other, .length = 64, .lkey = mr2->lkey};
    w.sg_list = &foreign;
    SAY("lkey_of_another_pd", ibv_post_send(qp, &w, &bad));
    w.sg_list = &sge;
    sge.length = sizeof(buf) + 1;
    SAY("sge_past_region", ibv_post_send(qp, &w, &bad));
    sge.length = 64;
    w.num_sge = 5;
    SAY("five_sges", ibv_post_send(qp, &w, &bad));
    w.num_sge = 1;
    w.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    sge.length = 1024;
    SAY("inline_too_long", ibv_post_send(qp, &w, &bad));
    struct ibv_qp_attr qattr;
    struct ibv_qp_init_attr qinit;
    SAY("query_qp", ibv_query_qp(qp, &qattr, IBV_QP_STATE, &qinit));
    SAY("query_qp_state_rts", qattr.qp_state == IBV_QPS_RTS ? 0 : 1);
    struct ibv_recv_wr rw = {.wr_id = 7, .sg_list = &sge, .num_sge = 1}, *rbad = NULL;
    SAY("recv_with_buffer", ibv_post_recv(qp, &rw, &rbad));
    rw.num_sge = 0;
    SAY("recv_for_write_imm", ibv_post_recv(qp, &rw, &rbad));
    SAY("dealloc_pd_in_use", ibv_dealloc_pd(pd));
    /* the QP is connected to itself: a WRITE_WITH_IMM into our own region, waited for on the channel */
    SAY("req_notify", ibv_req_notify_cq(cq, 0));
    memset(buf, 0x5A, 64);
    sge = (struct ibv_sge){.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
    w = (struct ibv_send_wr){.wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(0xC0FFEE),
                             .wr = {.rdma = {.remote_addr = (uintptr_t)buf + 4096, .rkey = mr->rkey}}};
    SAY("write_imm_to_self", ibv_post_send(qp, &w, &bad));
    struct ibv_cq *ev_cq = NULL;
    void *ev_ctx = NULL;
    alarm(10); /* a lost event fails the test rather than hang it */
    SAY("get_cq_event", ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
    SAY("event_names_the_cq", ev_cq == cq ? 0 : 1);
    ibv_ack_cq_events(cq, 1);
    int send_ok = 0, recv_imm = 0;
    for (int spins = 0; spins < 10000000 && !(send_ok && recv_imm); spins++) {
        struct ibv_wc wc;
        if (ibv_poll_cq(cq, 1, &wc) == 1) {
            if (wc.opcode == IBV_WC_RDMA_WRITE && wc.wr_id == 9 && wc.status == IBV_WC_SUCCESS)
                send_ok = 1;
            if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && wc.wr_id == 7 && be32toh(wc.imm_data) == 0xC0FFEE &&
                wc.byte_len == 64 && wc.status == IBV_WC_SUCCESS)
                recv_imm = 1;
        }
    }
    alarm(0);
    SAY("send_completed", send_ok ? 0 : 1);
    SAY("imm_received", recv_imm ? 0 : 1);
    SAY("data_placed", memcmp(buf, buf + 4096, 64) ? 1 : 0);
    /* exits without destroying anything: closing the process ends the engine */
    printf("end 0\n");
    fflush(stdout);
    return 0;
}
