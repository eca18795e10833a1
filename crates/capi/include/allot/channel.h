/*
 * allot/channel.h — named channels between cells: bounded message rings
 * in shared memory, with a doorbell a program can poll(2).
 *
 * A channel has any number of sending ends and one receiving end. The
 * broker creates it on first use, checks who may open it (its creator's
 * user, root, and the users its configuration lists), and tells each end
 * when the other is gone: a receiver gets ALLOT_ERR_CLOSED once the ring
 * is empty and no sender is left, a sender once the receiver is gone.
 * Messages are copied in and out whole; none is torn or lost while both
 * ends live.
 *
 * A part of allot.h, which includes it: include <allot.h>, not this file.
 * The conventions at the top of allot.h hold for every function here.
 */
#ifndef ALLOT_CHANNEL_H
#define ALLOT_CHANNEL_H

#ifndef ALLOT_H
#error "include <allot.h>; allot/channel.h is a part of it"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Which end. */
enum { ALLOT_CHANNEL_SEND = 0, ALLOT_CHANNEL_RECV = 1 };

/* allot_channel_send: fail with ALLOT_ERR_TIMEOUT on a full ring instead
 * of waiting for room. */
#define ALLOT_CHANNEL_NOWAIT 1

/* Opens one end of the channel `name` (1 to 64 of A-Z a-z 0-9 . _ -)
 * through the broker at $ALLOT_SOCKET (or the per-user default), creating
 * the channel, with at least `slots` slots of messages up to `message_max`
 * bytes, if it does not exist (0 for the defaults, 64 slots of 4080 bytes,
 * or an existing channel's sizes). The end keeps a connection to the
 * broker until allot_channel_close; the broker counts it open until then,
 * or until the process exits.
 *
 * Contexts: any thread; one round trip to the broker.
 * Errors: ALLOT_ERR_INVALID (name or out NULL, a bad name or size, an end
 *   other than SEND or RECV); ALLOT_ERR_NO_BROKER; ALLOT_ERR_PERMISSION
 *   (another user's channel); ALLOT_ERR_REFUSED (a receiver is open
 *   already; a size larger than the existing channel's); ALLOT_ERR_OS (a
 *   per-user limit, memory); ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: `name` not NUL-terminated. */
int allot_channel_open(const char *name, int end, uint32_t slots, uint32_t message_max,
                       allot_channel_t *out);

/* Takes the end `allot run --channel NAME:send|recv` passed to this
 * process (ALLOT_CHANNELS); each end can be taken once.
 *
 * Contexts: any thread. No system call to the broker.
 * Errors: ALLOT_ERR_INVALID (name or out NULL; no such end was passed, or
 *   it was taken already); ALLOT_ERR_OS (the memory is not a channel);
 *   ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: `name` not NUL-terminated. */
int allot_channel_inherited(const char *name, int end, allot_channel_t *out);

/* Sends `len` bytes. On a full ring waits for room, or with
 * ALLOT_CHANNEL_NOWAIT in `flags` fails at once.
 *
 * Contexts: any thread; several threads may send on one end.
 * Errors: ALLOT_ERR_INVALID (msg NULL with len > 0; longer than the
 *   channel's message_max; a receiving end); ALLOT_ERR_TIMEOUT (full, with
 *   ALLOT_CHANNEL_NOWAIT); ALLOT_ERR_CLOSED (the receiver is gone);
 *   ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: `msg` shorter than `len`. */
int allot_channel_send(allot_channel_t ch, const void *msg, size_t len, int flags);

/* Receives the next message into `buf` (of `cap` bytes) and stores its
 * length in *len. Waits up to `timeout_ns` (0: not at all; negative:
 * without limit). A message longer than `cap` stays in the channel and
 * *len says how long it is (ALLOT_ERR_INVALID).
 *
 * Contexts: one thread at a time per receiving end (others wait for it).
 * Errors: ALLOT_ERR_TIMEOUT (nothing came); ALLOT_ERR_CLOSED (every sender
 *   is gone and the ring is empty); ALLOT_ERR_INVALID (buf or len NULL, a
 *   message longer than cap, a sending end); ALLOT_ERR_HANDLE;
 *   ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: `buf` shorter than `cap`. */
int allot_channel_recv(allot_channel_t ch, void *buf, size_t cap, size_t *len,
                       int64_t timeout_ns);

/* The receiving end's doorbell, to poll(2) for POLLIN: call
 * allot_channel_arm first, and poll only when it returns 1; then receive
 * with timeout 0 until ALLOT_ERR_TIMEOUT. The descriptor belongs to the
 * channel: do not close it.
 *
 * Returns the descriptor, or -1 (a sending end, a bad handle; see
 * allot_last_error). Contexts: any thread. */
int allot_channel_fd(allot_channel_t ch);

/* Asks the next sender to ring the doorbell. Returns 1 when armed (poll
 * the descriptor), 0 when a message already waits (receive it instead),
 * or a negative value on error (-ALLOT_ERR_HANDLE, -ALLOT_ERR_INVALID for
 * a sending end). Contexts: any thread. */
int allot_channel_arm(allot_channel_t ch);

/* Closes the end (the other side learns it) and frees the handle.
 *
 * Contexts: any thread, not while another thread uses the end.
 * Errors: ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN. */
int allot_channel_close(allot_channel_t ch);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ALLOT_CHANNEL_H */
