/* Whether the launcher tells a job's survivors of a lost process through
 * PMIx's event notification (bench/pmix_events.sh runs it). Each rank
 * registers one handler for every event (and, for launchers that only
 * deliver what was asked for by code, for the codes of a process that
 * ended or aborted); rank 1 then exits with code 9 without finalizing, and
 * every other rank waits up to 5 s for an event. Each survivor prints one
 * line: "rank R: event STATUS (NAME) from NSPACE:RANK after S s", or "rank
 * R: no event in 5 s". */
#include <mpi.h>
#include <pmix.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static volatile int seen = 0;
static char what[256];

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void OnEvent(size_t id, pmix_status_t status, const pmix_proc_t* source, pmix_info_t info[], size_t ninfo,
                    pmix_info_t results[], size_t nresults, pmix_event_notification_cbfunc_fn_t done, void* cbdata) {
  (void)id, (void)info, (void)ninfo, (void)results, (void)nresults;
  if (!seen) {
    snprintf(what, sizeof what, "event %d (%s) from %s:%u", status, PMIx_Error_string(status),
             source != NULL ? source->nspace : "?", source != NULL ? source->rank : 0u);
    seen = 1;
  }
  if (done != NULL) done(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  pmix_proc_t me;
  const pmix_status_t rc = PMIx_Init(&me, NULL, 0);
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "rank %d: PMIx_Init failed: %s (the launcher gives no PMIx server)\n", rank, PMIx_Error_string(rc));
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  pmix_status_t ended[] = {PMIX_ERR_PROC_ABORTED, PMIX_ERR_PROC_ABORTING, PMIX_PROC_TERMINATED,
                           PMIX_ERR_PROC_TERM_WO_SYNC, PMIX_EVENT_PROC_TERMINATED, PMIX_EVENT_JOB_END,
                           PMIX_ERR_LOST_CONNECTION};
  PMIx_Register_event_handler(ended, sizeof ended / sizeof ended[0], NULL, 0, OnEvent, NULL, NULL);
  PMIx_Register_event_handler(NULL, 0, NULL, 0, OnEvent, NULL, NULL);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = Now();
  if (rank == 1) _exit(9);
  while (!seen && Now() - start < 5) usleep(10000);
  if (seen) {
    printf("rank %d: %s after %.3f s\n", rank, what, Now() - start);
  } else {
    printf("rank %d: no event in 5 s\n", rank);
  }
  fflush(stdout);
  _exit(0); /* a peer is gone: MPI_Finalize would wait for it */
}
