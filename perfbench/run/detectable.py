"""What a job can detect on this host: the noise file `perfbench calibrate` left for this host kind and scenario.

`ab`, `run` and `gate` print the line (`detect_line`), and `ab` takes the cap the file recommends when the user
gave none. Without a noise file they say how to make one.
"""

from __future__ import annotations

from perfbench.errors import UserError
from perfbench.results.host_kind import this_host
from perfbench.results.noise_record import NoiseRecord, noise_path, read_noise
from perfbench.roofline.peaks import cache_dir
from perfbench.terminal_text import echo

DEFAULT_RECORD_S = 300.0  # calibrate's default recording time


def noise_for(scenario: str) -> NoiseRecord | None:
    """This host kind's noise file for `scenario` from the per-user cache; None when there is none (a file that
    cannot be read is reported and ignored)."""
    path = noise_path(cache_dir(), this_host(), scenario)
    if not path.is_file():
        return None
    try:
        return read_noise(path)
    except UserError as err:
        echo(f"perfbench: ignoring the noise file: {err}", err=True)
        return None


def detect_line(scenario: str, job: str = "this job") -> tuple[str, float | None]:
    """What a job of `scenario` could see here, in one line, and the cap the noise file recommends (None: no noise
    file, or no cap decides 90% of A/A jobs)."""
    record = noise_for(scenario)
    if record is None or record.detectable is None:
        return (f"no noise file for {scenario} on this host kind ({this_host().describe()}): `perfbench calibrate "
                f"{scenario}` records one (about {DEFAULT_RECORD_S / 60:.0f} min plus start-up) and says what a job "
                "here can detect", None)
    d = record.detectable
    change = f"{d.smallest_change:.1%}" if d.smallest_change is not None else "no change up to 50%"
    return (f"{job} could detect {change} (80% of jobs) at a {d.cap_s:g} s cap, by the noise recorded "
            f"{record.recorded[:10]} on this host kind ({record.load.condition or 'condition not named'})",
            d.recommended_cap_s)
