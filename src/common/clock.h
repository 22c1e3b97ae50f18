/* The one clock of timings, deadlines and rates (monotonic: a wall-clock step cannot make an
 * interval negative or fire a deadline early). */
#ifndef INVAR_COMMON_CLOCK_H
#define INVAR_COMMON_CLOCK_H

/* Seconds on CLOCK_MONOTONIC (pthread_condattr_setclock waits on the same clock). */
double now_seconds(void);

#endif
