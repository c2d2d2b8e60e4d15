"""Which failed requests of a run mean that the server is away for now, so that what they
carried is kept for later and the run trains on (`for_later`), and which at a run's start mean
that it trains without the server (`away_at_start`); anything else is an error to raise."""

from __future__ import annotations

from zeus_bso.errors import (
    RouteMissingError,
    ServerConnectionError,
    ServerRejectedError,
    ZeusBSOError,
)

AWAY_PATIENCE = 5.0
"""The most seconds a report waits on a server that did not take the run's last one (its answer,
and its retries while it answers 503), where the client's own are more: a server that hangs (a
stuck database, a network that drops its packets) held each validation of the run for the
client's whole timeout (30 s), and the run trained that much less an hour. Reports are
cumulative: one not taken now is kept, and the next carries it. A power profile waits as long
(the run then chooses its limit itself: `zeus_bso.power.run.PowerLimitRun`), and so does an
out-of-memory mark (kept for the next run, which delivers it before it asks for its batch
size)."""


NOT_TAKEN_NOW = frozenset({408, 429, 503})
"""Statuses of a request that nothing took and that may be repeated: a zeus-bso server's 503
(its database busy or away: it wrote nothing), a reverse proxy's or gateway's 429 (its rate
limit: an ingress's ``limit-rps``) and 408 (it timed out reading the request)."""


def for_later(err: ZeusBSOError) -> bool:
    """Whether a request of a run under way failed because the server is away for now
    (unreachable, a 5xx, or `NOT_TAKEN_NOW` still after the retries), or refuses the token it
    took when the run started (401: it was rotated, or the server restarted with one), or
    because something between the run and the server answered in its stead with a page of its
    own (a 403 of an authenticating proxy whose session ran out, a firewall's; not a 404 or 405:
    `for_later_on_a_known_route`): what it carried can be delivered later, by a run that
    reaches the server, and the run trains on. (At a run's start a refused token or a page
    not the server's is an error: `away_at_start`.)"""
    if isinstance(err, ServerConnectionError):
        return True
    if not isinstance(err, ServerRejectedError):
        return False
    if err.status >= 500 or err.status == 401 or err.status in NOT_TAKEN_NOW:
        return True
    return not err.ours and not isinstance(err, RouteMissingError)


def for_later_on_a_known_route(err: ZeusBSOError) -> bool:
    """Whether a request of a run under way to a route the server has is kept for later
    (`for_later`), or because a page not the server's answered it 404 or 405
    (`RouteMissingError`): a route of upstream's protocol (the report), which every server a
    run started on has, or one the server declared at dispatch (its extensions header); such a
    page is then a reverse proxy's whose routes changed under the run, not a server without the
    route."""
    return for_later(err) or isinstance(err, RouteMissingError)


def token_refused(err: ZeusBSOError) -> bool:
    """Whether the server refused the token the run took when it started (401)."""
    return isinstance(err, ServerRejectedError) and err.status == 401


def away_at_start(err: ZeusBSOError) -> bool:
    """Whether the server is away at a run's start: unreachable, busy (503), a reverse
    proxy's gateway errors while the server behind it is down or restarting (502, 504), or its
    rate limit or timeout (429, 408). Anything else is a usage error."""
    return isinstance(err, ServerConnectionError) or (
        isinstance(err, ServerRejectedError) and err.status in NOT_TAKEN_NOW | {502, 504}
    )
