"""The sections of docs/results.md for authenticated MRC and the hostile
peer (tools/results.py renders them with the others)."""

from __future__ import annotations

from results_fmt import fmt, get, spread, table


def security_fabric(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    lines = [f"One MRC QP over every plane, 1 MiB writes, with security off, auth and encrypt in turn "
             f"({r.get('security_pairs')} rounds of {fmt(r.get('seconds'), 1)} s each, alternated so that the VM's "
             "drift touches all three alike); each round's secured rate over its off rate, the median and the "
             "range. AES-256-GCM runs in OpenSSL's libcrypto at both ends, on the same two cores as the kernel's "
             "forwarding of every hop.", ""]
    rows = [[m, ", ".join(fmt(x, 2) for x in r.get(f"{m}_gbps") or [])] for m in ("off", "auth", "encrypt")]
    lines += table(["mode", "Gb/s per round"], rows) + [""]
    lines += table(["figure", "measured", "target"], [
        [f"{m} / off", f"{fmt(r.get(f'{m}_over_off'))} "
                       f"{spread(r.get(f'{m}_over_off_spread'))}",
         f">= {get(r, f'targets.{m}_over_off')}"] for m in ("auth", "encrypt")])
    head = [["authenticated MRC: one QP's rate in auth / encrypt over off",
             f"{fmt(r.get('auth_over_off'))} / {fmt(r.get('encrypt_over_off'))}", ">= 0.9 / 0.85"]]
    return lines, head


def security_latency(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    lines = [f"The {fmt(r.get('size'))} B round trip of the latency bench with security off, auth and encrypt, "
             f"{r.get('rounds')} rounds of {fmt(r.get('iters'))}, the order turning each round; the p50 differences "
             "to off, the median of the rounds and their range. Rounds in which the p50 of whichever mode ran "
             "jumps to tens of microseconds are this VM's scheduling, not the cipher's: off shows the same jumps, "
             "and the per-round columns show where they fell.", ""]
    rows = [[p, fmt(get(r, f"{p}.p50_us"), 1), fmt(get(r, f"{p}.p99_us"), 1),
             ", ".join(fmt(x, 1) for x in get(r, f"{p}.per_round_p50_us") or [])]
            for p in ("mrc", "mrc_auth", "mrc_encrypt") if get(r, p)]
    lines += table(["", "p50 us", "p99 us", "p50 per round"], rows) + [""]
    lines += table(["figure", "measured", "target"], [
        [f"{m}: p50 over off", f"{fmt(r.get(f'{m}_minus_off_us'), 1)} us "
                               f"{spread(r.get(f'{m}_minus_off_spread_us'), 1, sep=' to ')}",
         "<= 2 us"] for m in ("auth", "encrypt")])
    head = [["authenticated MRC: 64 B round trip p50, auth / encrypt over off",
             f"{fmt(r.get('auth_minus_off_us'), 1)} / {fmt(r.get('encrypt_minus_off_us'), 1)} us", "<= 2 us"]]
    return lines, head


def hostile(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    lines = ["A process on the peer host, with the peer's address and a plain UDP socket, forges a write (the real "
             "rkey, the PSN the receiver expects), a SACK for writes that never arrived, a NACK REMOTE_ACCESS, a "
             "port status with no plane up, a trimmed data packet and answers to the probes of a path whose link is "
             "down (`probe`); a forger on the receiver's leaf port (a raw "
             "socket in the switch) replays a captured frame (`replay`), sends one with its payload changed "
             "and its PSN moved to the expected one (`tamper`) and one cut to its headers and marked trimmed "
             "(`ftrim`); the same forger watches the sender's frames across two reconnects under the same keys "
             "(`rekey`: a (key id, number) seen twice is a reused nonce) and sends one from before; a forger on the "
             "sender's leaf port moves the probes of a dead path onto a live plane as they pass (`moved`); a "
             "relay without the key meddles with each message of the setup channel after the handshake, both "
             "ways (`relay`, on loopback). Each against a fresh connection of each mode. "
             "`effects`: what changed at the target; `counted`: what it dropped and counted.", ""]
    modes = r.get("modes") or {}
    rows = []
    for mode, attacks in modes.items():
        for kind, a in attacks.items():
            eff = ", ".join(f"{k} {v}" for k, v in a["effects"].items() if v) or "none"
            cnt = ", ".join(f"{k} {v}" for k, v in a["counted"].items()) or "none"
            rows.append([mode, kind, eff, cnt])
    lines += table(["mode", "attack", "effects", "counted"], rows)
    n = len(next(iter(modes.values()), {}))
    head = [["hostile peer and on-path forger: attacks with an effect, off / auth / encrypt",
             " / ".join(f"{r.get(f'{m}_attacks_with_effect')} of {n}" for m in ("off", "auth", "encrypt")),
             "- / 0 / 0"]]
    fc = r.get("forgery_cost")
    if fc:
        lines += ["", "What a forged packet costs the receiver (one process, "
                      f"{fmt(fc.get('rounds'))} alternated rounds "
                      f"of {fmt(fc.get('n'))} forgeries each): naming the current key id {fmt(fc.get('us_current'))} "
                      f"us, the next one {fmt(fc.get('us_next'))} us; the next over the current, the median of the "
                      f"rounds' ratios: {fmt(fc.get('next_over_current'))} "
                      f"{spread(fc.get('next_over_current_spread'))}."]
        head.append(["authenticated MRC: a forgery naming the next key id over one naming the current",
                     f"{fmt(fc.get('next_over_current'))}", f"<= {get(r, 'targets.forgery_next_over_current')}"])
    return lines, head


def security_coll(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    lines = ["`mrc coll` on the collectives bench's fabric (4 hosts x 8 planes, every port at "
             f"{fmt((r.get('rate_bps') or 0) / 1e6, 0)} Mbit/s) with `--security` off, auth and encrypt "
             "alternated in every round (one key, `--psk-file`); busbw per mode and each secured mode over off, "
             "the median of the rounds' ratios and their range.", ""]
    rows = []
    for m in ("mrc", "mrc_auth", "mrc_encrypt"):
        for c in ("all_reduce", "all_to_all"):
            rows.append([m.replace("mrc_", "") if m != "mrc" else "off", c, fmt(get(r, f"{m}.{c}.busbw_gbps")),
                         fmt(get(r, f"{m}.{c}.busbw_vs_bound"))])
    lines += table(["mode", "collective", "busbw Gb/s", "of the bound"], rows) + [""]
    lines += table(["figure", "measured", "target"], [
        [f"{m} / off, {c}", f"{fmt(get(r, f'{m}_over_off.{c}'))} "
                            f"{spread(get(r, f'{m}_over_off.{c}_spread'))}",
         f">= {get(r, f'targets.{m}_over_off')}" if c == "all_reduce" else "-"]
        for m in ("auth", "encrypt") for c in ("all_reduce", "all_to_all")])
    head = [["authenticated MRC: 64 MiB all-reduce busbw, auth / encrypt over off",
             f"{fmt(get(r, 'auth_over_off.all_reduce'))} / {fmt(get(r, 'encrypt_over_off.all_reduce'))}",
             ">= 0.95 / 0.9"]]
    return lines, head


def security_congestion(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    w = get(r, "workloads.incast") or {}
    lines = [f"The congestion bench's incast ({fmt(r.get('hosts'))} hosts, switch ports at "
             f"{fmt((r.get('rate_bps') or 0) / 1e6, 0)} Mbit/s, trimming above {fmt(r.get('trim_kb'))} KB) with "
             f"MRC's QPs off, auth and encrypt, {fmt(w.get('rounds'))} alternated rounds; a trimmed secured packet "
             "is answered NACK TRIMMED through its header tag. Each mode's message-completion p99 over off's, the "
             "median of the rounds' ratios and their range.", ""]
    rows = [[m, fmt(get(w, f"{m}.p99_ms") if m != "mrc" else w.get("p99_ms"), 2),
             fmt(get(w, f"{m}.trims") if m != "mrc" else w.get("trims")),
             fmt(get(w, f"{m}.trim_nacks") if m != "mrc" else w.get("trim_nacks")),
             ", ".join(fmt(x, 2) for x in get(w, f"p99_ms_rounds.{m}") or [])]
            for m in ("mrc", "mrc_auth", "mrc_encrypt")]
    lines += table(["QPs", "p99 ms (first round)", "trims", "trim NACKs", "p99 per round"], rows) + [""]
    lines += table(["figure", "measured", "target"], [
        [f"{m} p99 / off", f"{fmt(w.get(f'{m}_over_off_p99_median'))} "
                           f"{spread(w.get(f'{m}_over_off_p99_spread'))}",
         "<= 1.1" if m == "auth" else "-"] for m in ("auth", "encrypt")])
    head = [["authenticated MRC: incast with trimming, p99 in auth / encrypt over off",
             f"{fmt(w.get('auth_over_off_p99_median'))} / {fmt(w.get('encrypt_over_off_p99_median'))}",
             "<= 1.1 / -"]]
    return lines, head

