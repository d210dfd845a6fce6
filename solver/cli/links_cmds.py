"""`solveplan links`: link matrices (import from nccl-tests, generate from a topology, show)
and placement of a plan's stages and replicas on unequal links (`links place`)."""

from __future__ import annotations

import json
import re

import click

from ..errors import InputError
from ..formulation.links import MAX_GENERATED_NODES
from ..specs.writing import write_text
from .options import OUTPUT, SECONDS, build_job, config_options, job_base_options, parse_ints


def _factor(text: str, field: str, item: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InputError(field, f"{item!r}: {text!r} is not a number") from None


def parse_degraded_node(text: str) -> tuple[int, float]:
    m = re.fullmatch(r"\s*(\d{1,9})\s*:\s*([0-9.eE+-]{1,30})\s*", text)
    if not m:
        raise InputError("degraded_nodes", f"{text!r}: write NODE:FACTOR, e.g. 3:0.25")
    node, f = int(m.group(1)), _factor(m.group(2), "degraded_nodes", text)
    if not (0 < f <= 1):
        raise InputError("degraded_nodes", f"{text!r}: the factor must be in (0, 1] (got {f})")
    return node, f


def parse_degraded_link(text: str) -> tuple[int, int, float]:
    m = re.fullmatch(r"\s*(\d{1,9})\s*-\s*(\d{1,9})\s*:\s*([0-9.eE+-]{1,30})\s*", text)
    if not m:
        raise InputError("degraded_links", f"{text!r}: write A-B:FACTOR, e.g. 2-5:0.5")
    a, b, f = int(m.group(1)), int(m.group(2)), _factor(m.group(3), "degraded_links", text)
    if a == b:
        raise InputError("degraded_links", f"{text!r}: a link joins two different nodes")
    if not (0 < f <= 1):
        raise InputError("degraded_links", f"{text!r}: the factor must be in (0, 1] (got {f})")
    return a, b, f



@click.group()
def links():
    """Per-link bandwidth input and GPU-group placement on unequal links."""


@links.command("import")
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=OUTPUT, help="Write the matrix (JSON) here.")
@click.option("--hosts", default=None, help="Comma-separated host order (node i = i-th host); default: order of appearance.")
@click.option("--one-way", is_flag=True, help="Do not mirror pairs measured in one direction only.")
@click.option("--allow-latency-bound", is_flag=True,
              help="Write the bandwidth of logs that stop below the bandwidth regime (refused by default: their "
                   "bus bandwidth is the latency's, far below the link's).")
def import_(logs, output, hosts, one_way, allow_latency_bound):
    """Build a measured matrix from nccl-tests sendrecv_perf logs, one per node pair.

    The pair of each log: a line '# solveplan-pair: SRC DST' in it, else the file name
    SRC__DST.log, else the two hosts of its device lines. Bandwidth is the bus bandwidth at
    the largest size, which must be in the bandwidth regime (else refused, unless
    --allow-latency-bound); latency the time of the smallest."""
    from ..placement.topology import describe, import_nccl_logs

    order = [h.strip() for h in hosts.split(",") if h.strip()] if hosts else None
    notes: list[str] = []
    lm = import_nccl_logs(list(logs), hosts=order, symmetric=not one_way, allow_latency_bound=allow_latency_bound,
                          notes=notes)
    for n in notes:
        click.echo(f"warning: {n}", err=True)
    lm.write(output, "-o")
    d = describe(lm)
    click.echo(f"wrote {output}: {d['hosts']} hosts, {len(d['levels_gbit_per_s'])} bandwidth levels")


@links.command("generate")
@click.option("--nodes", type=click.IntRange(1, MAX_GENERATED_NODES), required=True)
@click.option("--nodes-per-leaf", type=click.IntRange(min=1), default=None, help="Nodes behind one leaf switch (rack).")
@click.option("--oversubscription", type=float, default=1.0, show_default=True, help="Leaf-to-spine, e.g. 4 for 4:1.")
@click.option("--nic-gbit-per-s", type=float, default=200.0, show_default=True, help="NIC per GPU per direction.")
@click.option("--latency-us", type=float, default=8.0, show_default=True)
@click.option("--rack-order", type=click.Choice(["contiguous", "round-robin"]), default="contiguous", show_default=True,
              help="Node i in rack i // per-leaf (contiguous) or i % racks (round-robin: hosts interleave racks).")
@click.option("--degraded-node", "degraded_nodes", multiple=True, help="NODE:FACTOR, e.g. 3:0.25 (a NIC at a quarter).")
@click.option("--degraded-link", "degraded_links", multiple=True, help="A-B:FACTOR, e.g. 2-5:0.5.")
@click.option("--host-prefix", default="node", show_default=True)
@click.option("-o", "--output", required=True, type=OUTPUT)
def generate(nodes, nodes_per_leaf, oversubscription, nic_gbit_per_s, latency_us, rack_order, degraded_nodes,
             degraded_links, host_prefix, output):
    """Generate the matrix of a leaf/spine topology with degraded nodes and links."""
    from ..placement.topology import generate_links

    lm = generate_links(nodes, nodes_per_leaf=nodes_per_leaf, oversubscription=oversubscription,
                        nic_gbit_per_s=nic_gbit_per_s, latency_us=latency_us, rack_order=rack_order,
                        degraded_nodes=[parse_degraded_node(x) for x in degraded_nodes],
                        degraded_links=[parse_degraded_link(x) for x in degraded_links], host_prefix=host_prefix)
    lm.write(output, "-o")
    click.echo(f"wrote {output}: {lm.source}" + (f"; {', '.join(lm.notes)}" if lm.notes else ""))


@links.command("show")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True)
def show(file, as_json):
    """Summarise a link matrix (JSON or CSV): levels, slowest pairs, interchangeable nodes."""
    from ..placement.links import load_links
    from ..placement.topology import describe

    d = describe(load_links(file))
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    click.echo(f"{file}: {d['hosts']} hosts ({'measured' if d['measured'] else 'nominal'}; {d['source']})")
    for lv in d["levels_gbit_per_s"]:
        click.echo(f"  {lv['gbit_per_s']:>10g} Gbit/s  {lv['directed_pairs']} directed pairs")
    click.echo(f"  asymmetric pairs: {d['asymmetric_pairs']}; interchangeable node classes: "
               f"{d['interchangeable_classes']} (largest {d['largest_class']})")
    for s in d["slowest_pairs"]:
        click.echo(f"  slow: {s['a']} <-> {s['b']} {s['gbit_per_s']:g} Gbit/s")
    for n in d["notes"]:
        click.echo(f"  note: {n}")


@links.command("place")
@job_base_options
@click.option("--links", "links_file", required=True, type=click.Path(dir_okay=False), help="Link matrix (JSON/CSV).")
@config_options
@click.option("--dp", type=click.IntRange(min=1), default=None, help="Checked against GPUs / (tp*cp*pp).")
@click.option("--layers-per-stage", default=None, help="Comma-separated layer counts, one per pipeline stage.")
@click.option("--method", type=click.Choice(["auto", "cpsat", "exhaustive"]), default="auto", show_default=True)
@click.option("--time-limit", type=SECONDS, default=60.0, show_default=True, help="Seconds for CP-SAT.")
@click.option("--hostfile", "hostfile_out", default=None, type=OUTPUT, help="Write the hostfile here.")
@click.option("--ranks", is_flag=True, help="Print the RANK -> (stage, replica, cp, tp) table.")
@click.option("--json", "as_json", is_flag=True)
def place_cmd(links_file, tp, pp, cp, vp, ep, etp, micro_batch_size, recompute, sequence_parallel, zero, dp, layers_per_stage,
              method, time_limit, hostfile_out, ranks, as_json, **base):
    """Place a plan's (stage, replica) groups on nodes with unequal links."""
    from ..placement.links import load_links
    from ..placement.place import place
    from ..plan import plan_config
    from ..render.hostfile import render_placement, render_rank_table, result_hostfile, result_rank_table

    job = build_job(**base)
    plan = plan_config(job, dict(tp=tp, pp=pp, dp=dp, cp=cp, vp=vp, ep=ep, etp=etp, micro_batch_size=micro_batch_size,
                                 recompute=recompute, sequence_parallel=sequence_parallel, zero=zero,
                                 layers=parse_ints(layers_per_stage, "layers") if layers_per_stage is not None else None))
    lm = load_links(links_file, cluster=job.cluster)
    res = place(job, plan.parallel, lm, layers=plan.layers_per_stage, method=method, time_limit_s=time_limit)
    if hostfile_out:
        write_text(hostfile_out, result_hostfile(res), "--hostfile")
    if as_json:
        d = res.model_dump()
        d["hostfile"] = result_hostfile(res)
        if ranks:
            d["ranks"] = result_rank_table(res)
        click.echo(json.dumps(d, indent=2))
        return
    click.echo(render_placement(res, lm.n), nl=False)
    if ranks:
        click.echo(render_rank_table(result_rank_table(res)), nl=False)


place_cmd.name = "place"
links.add_command(place_cmd, "place")
