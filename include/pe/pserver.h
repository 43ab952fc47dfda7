/* pe/pserver.h — the trainer's side of parameter-server training.
 *
 *     // a trainer runs a transpiled trainer program (send / recv ops) with
 *     // pe_executor_run; the pservers run their programs (listen_and_serv)
 *     // the same way, or with `pe pserver`. When the trainer is done:
 *     if (pe_ps_trainer_close() != PE_OK) fprintf(stderr, "%s\n", pe_last_error());
 *
 * The process's connections to the pservers are made by the first send /
 * recv / barrier op and live until pe_ps_trainer_close, which tells every
 * pserver the trainer has left (Paddle's exe.close(): the pservers' sync
 * barriers stop waiting for it, and a pserver's loop ends when all of its
 * trainers have left). Idempotent; a no-op when the process never talked
 * to a pserver. Errors name the endpoint that did not acknowledge.
 *
 * Environment (seconds): PE_PS_CONNECT_TIMEOUT (60: how long a trainer
 * waits for a pserver that is not listening yet), PE_PS_TIMEOUT (3600: the
 * longest wait for any reply from a live pserver), PE_PS_TRAINER_WAIT (600:
 * how long a pserver waits for a trainer that never connects). A pserver
 * that dies is an error within ~2 s (heartbeats), whatever these say.
 */
#ifndef PE_PSERVER_H
#define PE_PSERVER_H

#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

pe_status pe_ps_trainer_close(void);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
