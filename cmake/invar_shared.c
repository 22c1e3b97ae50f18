/* libinvar.so has no code of its own: the engine's static library is linked in whole and
 * cmake/invar_shared.map exports its invar_* functions. (A shared library needs a source.) */
typedef int invar_shared_no_code;
