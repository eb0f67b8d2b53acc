//! Differential dataflow peer of bench/recursive.py and bench/triangles.py (one timely worker).
//!
//! Input (text, written by bench/peers/dd.py): a first line naming the view (`reach`, `sp` or
//! `tri`), then the batches: lines `src dst cost diff` (vertex ids as u32, diff +1 / -1), each
//! batch closed by a line `B`. Batch 0 is the load. Output (stdout): per batch a line
//! `B index cpu_ns wall_ns changes`, then the batch's consolidated output changes:
//! `src dst value diff` (reach: value 0; sp: the cheapest cost; tri: `0 0 count diff`).
//! Timing covers feeding the batch and running the dataflow to completion, not reading or writing.

use std::cell::RefCell;
use std::io::{BufRead, BufWriter, Write};
use std::rc::Rc;

use differential_dataflow::input::Input;
use differential_dataflow::operators::iterate::Iterate;
use differential_dataflow::VecCollection;
use timely::dataflow::operators::probe::Handle;

type Update = ((u32, u32, u64), isize);

fn cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn read_batches() -> (String, Vec<Vec<Update>>) {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let view = lines.next().expect("empty input").unwrap().trim().to_string();
    let mut batches = vec![Vec::new()];
    for line in lines {
        let line = line.unwrap();
        let line = line.trim();
        if line == "B" {
            batches.push(Vec::new());
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let (u, v, c, d) = (f[0].parse().unwrap(), f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].parse().unwrap());
        batches.last_mut().unwrap().push(((u, v, c), d));
    }
    if batches.last().map_or(false, |b| b.is_empty()) {
        batches.pop();
    }
    (view, batches)
}

fn main() {
    let (view, batches) = read_batches();
    timely::execute_directly(move |worker| {
        let out: Rc<RefCell<Vec<((u32, u32, u64), u64, isize)>>> = Rc::new(RefCell::new(Vec::new()));
        let sink = out.clone();
        let probe = Handle::new();
        let mut input = worker.dataflow::<u64, _, _>(|scope| {
            let (input, edges) = scope.new_collection::<(u32, u32, u64), isize>();
            let sink = sink.clone();
            let result: VecCollection<_, (u32, u32, u64), isize> = match view.as_str() {
                "reach" => reach(edges),
                "sp" => shortest(edges),
                "tri" => triangles(edges),
                other => panic!("unknown view {other}"),
            };
            result
                .consolidate()
                .inspect(move |(d, t, r)| sink.borrow_mut().push((*d, *t, *r)))
                .probe_with(&probe);
            input
        });
        let stdout = std::io::stdout();
        let mut w = BufWriter::new(stdout.lock());
        for (i, batch) in batches.iter().enumerate() {
            let (c0, t0) = (cpu_ns(), std::time::Instant::now());
            for (data, diff) in batch {
                input.update(*data, *diff);
            }
            input.advance_to(i as u64 + 1);
            input.flush();
            worker.step_while(|| probe.less_than(input.time()));
            let (cpu, wall) = (cpu_ns() - c0, t0.elapsed().as_nanos() as u64);
            let mut got = std::mem::take(&mut *out.borrow_mut());
            got.sort();
            writeln!(w, "B {} {} {} {}", i, cpu, wall, got.len()).unwrap();
            for ((u, v, c), _t, r) in got {
                writeln!(w, "{} {} {} {}", u, v, c, r).unwrap();
            }
        }
        w.flush().unwrap();
    });
}

/// reachable(x, z) :- link(x, z); reachable(x, z) :- reachable(x, y), link(y, z).
fn reach<'s>(edges: VecCollection<'s, u64, (u32, u32, u64), isize>) -> VecCollection<'s, u64, (u32, u32, u64), isize> {
    let arcs = edges.map(|(u, v, _)| (u, v)).distinct();
    let by_src = arcs.clone().arrange_by_key();
    arcs.clone()
        .iterate(|scope, inner| {
            let links = by_src.enter(scope);
            let base = arcs.enter(scope);
            inner
                .map(|(x, y)| (y, x))
                .join_core(links, |_y, &x, &z| Some((x, z)))
                .concat(base)
                .distinct()
        })
        .map(|(x, y)| (x, y, 0))
}

/// Cheapest cost per (x, z): min over link(x, z) and path(x, y) + link(y, z) (costs > 0).
fn shortest<'s>(edges: VecCollection<'s, u64, (u32, u32, u64), isize>) -> VecCollection<'s, u64, (u32, u32, u64), isize> {
    let by_src = edges.clone().map(|(u, v, c)| (u, (v, c))).arrange_by_key();
    let base = edges.map(|(u, v, c)| ((u, v), c));
    base.clone()
        .iterate(|scope, inner| {
            let links = by_src.enter(scope);
            let base = base.enter(scope);
            inner
                .map(|((x, y), c)| (y, (x, c)))
                .join_core(links, |_y, &(x, c1), &(z, c2)| Some(((x, z), c1 + c2)))
                .concat(base)
                .reduce(|_xz, costs, out| out.push((*costs[0].0, 1)))
        })
        .map(|((x, z), c)| (x, z, c))
}

/// Triangle count of an undirected graph (each edge once, either orientation): the binary plan
/// (edges as (lower, higher) ids; 2-paths u-v, u-w by u, then closed by the edge (v, w)).
fn triangles<'s>(edges: VecCollection<'s, u64, (u32, u32, u64), isize>) -> VecCollection<'s, u64, (u32, u32, u64), isize> {
    let arcs = edges.map(|(u, v, _)| if u < v { (u, v) } else { (v, u) });
    let by_first = arcs.clone().arrange_by_key();
    arcs.clone()
        .join_core(by_first, |&u, &v, &w| if v < w { Some(((v, w), u)) } else { None })
        .semijoin(arcs)
        .map(|_| ())
        .count()
        .map(|((), n)| (0, 0, n as u64))
}
