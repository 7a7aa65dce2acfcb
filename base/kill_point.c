#include "base/kill_point.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void kill_point(const char *site) {
    // the variable is read at every pass (the sites are not hot) so that a test may set it in
    // a forked child; the count restarts whenever its value changes
    static char last[96];
    static long count;
    const char *env = getenv("HYBRID_KILL_AT");
    if (!env || !*env) return;
    if (strcmp(env, last)) {
        if (strlen(env) >= sizeof last) die("HYBRID_KILL_AT = '%s': too long", env);
        strcpy(last, env);
        count = 0;
    }
    const char *colon = strrchr(env, ':');
    char *end;
    long at = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || colon == env || *end || at < 1)
        die("HYBRID_KILL_AT = '%s': expected <site>:<n> with n >= 1 (see base/kill_point.h)", env);
    if ((size_t)(colon - env) == strlen(site) && !strncmp(env, site, strlen(site)) && ++count == at) raise(SIGKILL);
}
