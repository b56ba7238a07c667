//! `fidelity = "fast"` (`gradwire_sim::fast`): a PS job simulated through a sample of its
//! servers. Its error against packet level is measured by `benchmarks/sim_fast`, not here;
//! these tests pin what it must do whatever its error: simulate exactly the sampled
//! servers' flows, reduce to packet level when it samples every server, conserve packets,
//! and refuse by name what it cannot sample.

use gradwire_sim::fast::Sample;
use gradwire_sim::output::flows_csv;
use gradwire_sim::topology::Topology;
use gradwire_sim::{load, Simulation};

/// ResNet18 from 12 workers through 4 dedicated servers on a k = 4 fat-tree (16 hosts).
fn ps(extra: &str) -> String {
    format!(
        "seed = 3\nstop_ms = 5000\n{extra}\n[topology]\nkind = \"fat_tree\"\nk = 4\n[transport]\nkind = \"dctcp\"\n\
         [workload]\nkind = \"dnn\"\nmodel = \"resnet18\"\npattern = \"ps\"\nworkers = 12\nservers = 4\n\
         colocated = false\n"
    )
}

fn run(text: &str) -> Simulation {
    let mut sim = Simulation::new(&load(text, &[]).unwrap()[0].scenario).unwrap();
    sim.run();
    sim
}

#[test]
fn sampling_every_server_is_packet_level() {
    let packet = run(&ps(""));
    let fast = run(&ps("fidelity = \"fast\"\n[fast]\nservers = 4"));
    assert_eq!(flows_csv(&fast), flows_csv(&packet), "4 of 4 servers: the same run");
}

#[test]
fn a_sample_runs_exactly_its_servers_flows() {
    let packet = run(&ps(""));
    let fast = run(&ps("fidelity = \"fast\"\n[fast]\nservers = 2"));
    let (all, some) = (packet.flow_count(), fast.flow_count());
    // about half: a tensor below `split_bytes` goes whole to one server drawn at random
    assert!(some * 3 < all * 2 && some * 3 > all, "2 of 4 servers: {some} of {all} flows");
    let c = fast.conservation();
    assert!(c.holds(), "{c:?}");
    assert_eq!(fast.progress().flows_done, some as u64, "every sampled flow finished");
    // the job's servers are hosts 12..16 in rack order; the sample is its 1st and 3rd
    let sample = fast.fast_sample().expect("a fast run");
    assert_eq!((sample.of, sample.m), (4, 2.0));
    let servers = sample.servers.clone();
    assert_eq!(servers.len(), 2, "{servers:?}");
    for row in flows_csv(&fast).lines().skip(1) {
        let cols: Vec<u32> = row.split(',').skip(1).take(2).map(|c| c.parse().unwrap()).collect();
        assert!(servers.contains(&cols[0]) || servers.contains(&cols[1]), "{row}");
    }
    // and packet level's flows of those servers are the same flows, in the same order
    let keep = |csv: String| -> Vec<String> {
        csv.lines()
            .skip(1)
            .filter(|r| r.split(',').skip(1).take(2).any(|c| servers.contains(&c.parse().unwrap())))
            .map(|r| r.split(',').skip(1).take(3).collect::<Vec<_>>().join(","))
            .collect()
    };
    assert_eq!(keep(flows_csv(&fast)), keep(flows_csv(&packet)));
}

#[test]
fn the_samples_at_every_offset_cover_the_job_once() {
    let packet = run(&ps(""));
    let (mut servers, mut flows) = (Vec::new(), 0);
    for offset in 0..2 {
        let fast = run(&ps(&format!("fidelity = \"fast\"\n[fast]\nservers = 2\noffset = {offset}")));
        servers.extend(fast.fast_sample().expect("a fast run").servers.clone());
        flows += fast.flow_count();
    }
    servers.sort();
    assert_eq!(servers, vec![9, 11, 13, 15], "every server once (round-robin over the racks)");
    assert_eq!(flows, packet.flow_count(), "every flow of the job once");
    let beyond = ps("fidelity = \"fast\"\n[fast]\nservers = 2\noffset = 2");
    let e = Simulation::new(&load(&beyond, &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "fast.offset", "{e}");
}

#[test]
fn a_sample_need_not_divide_the_servers() {
    // 3 of 4 servers: a packet stands for 4/3, one sample (offset 0), servers 1st to 3rd
    let packet = run(&ps(""));
    let fast = run(&ps("fidelity = \"fast\"\n[fast]\nservers = 3\nkeep_whole_tensors = true"));
    let sample = fast.fast_sample().expect("a fast run");
    assert_eq!((sample.of, sample.m, sample.samples), (4, 4.0 / 3.0, 1));
    assert!(fast.conservation().holds());
    assert_eq!(fast.progress().flows_done, fast.flow_count() as u64, "every flow finished");
    let x = fast.summary().fast.expect("a fast summary");
    assert_eq!(x.stands_for, 4.0 / 3.0);
    // each spread shard stands for 4/3 of the job's flows, each whole tensor's for itself
    assert_eq!(x.job_flows, Some(packet.flow_count() as u64));
    for (extra, key) in [("offset = 1", "fast.offset"), ("phantom = \"stretch\"", "fast.servers")] {
        let text = ps(&format!("fidelity = \"fast\"\n[fast]\nservers = 3\nunvalidated = true\n{extra}"));
        let e = Simulation::new(&load(&text, &[]).unwrap()[0].scenario).err().expect("refused");
        assert_eq!(e.key, key, "{e}");
    }
    // a cover needs disjoint samples that hold every server
    let cover = ps("fidelity = \"fast\"\n[fast]\nservers = 3\ncover = true");
    let e = gradwire_sim::Runner::new(&load(&cover, &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "fast.servers", "{e}");
    assert!(e.to_string().contains("leave 1 out"), "{e}");
}

#[test]
fn a_colocated_sample_runs_its_servers_flows_from_every_worker() {
    let colocated = |extra: &str| {
        ps(extra).replace("workers = 12", "workers = 16").replace("colocated = false", "colocated = true")
    };
    let packet = run(&colocated(""));
    let fast = run(&colocated("fidelity = \"fast\"\n[fast]\nservers = 2\nunvalidated = true"));
    let sample = fast.fast_sample().expect("a fast run");
    assert_eq!((sample.of, sample.m), (4, 2.0));
    let c = fast.conservation();
    assert!(c.holds(), "{c:?}");
    assert_eq!(fast.progress().flows_done, fast.flow_count() as u64, "every sampled flow finished");
    let servers = sample.servers.clone();
    let of_sample = |csv: String| -> Vec<String> {
        csv.lines()
            .skip(1)
            .filter(|r| {
                let c: Vec<u32> = r.split(',').skip(1).take(2).map(|c| c.parse().unwrap()).collect();
                // a pull leaves its server, a push arrives at it (column 11: pull)
                let server = if r.split(',').nth(10) == Some("1") { c[0] } else { c[1] };
                servers.contains(&server)
            })
            .map(|r| r.split(',').skip(1).take(3).collect::<Vec<_>>().join(","))
            .collect()
    };
    let got = of_sample(flows_csv(&fast));
    assert_eq!(got.len(), fast.flow_count(), "every flow of the sample is a sampled server's");
    assert_eq!(got, of_sample(flows_csv(&packet)), "the same flows as packet level's, in order");
}

#[test]
fn what_it_cannot_sample_is_refused_by_name() {
    let stretched_colocated = "colocated = true\n[fast]\nphantom = \"stretch\"\nunvalidated = true";
    for (extra, key) in [("pattern = \"ring\"", "workload.kind"), (stretched_colocated, "fast.phantom")] {
        let text = ps("fidelity = \"fast\"").replace("colocated = false\n", "").replace("pattern = \"ps\"\n", "")
            + extra
            + "\n";
        let e = Simulation::new(&load(&text, &[]).unwrap()[0].scenario).err().expect("refused");
        assert_eq!(e.key, key, "{e}");
        assert!(e.to_string().contains("fidelity = \"packet\""), "{e}");
    }
    let text = ps("fidelity = \"fast\"\n[pauses]\nhosts = 1");
    let e = Simulation::new(&load(&text, &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "pauses.hosts", "{e}");
    // a transport whose error was not measured within 5 % runs only when asked for
    let pfabric = ps("fidelity = \"fast\"").replace("kind = \"dctcp\"", "kind = \"pfabric\"");
    let e = Simulation::new(&load(&pfabric, &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "transport.kind", "{e}");
    assert!(e.to_string().contains("fast.unvalidated"), "{e}");
    // DLCP was measured with every server's whole tensors, which it keeps unless told not to
    let sampled = "fidelity = \"fast\"\n[fast]\nservers = 2";
    let dlcp = ps(sampled).replace("kind = \"dctcp\"", "kind = \"dlcp\"");
    let keeps = |text: &str| {
        let sim = Simulation::new(&load(text, &[]).unwrap()[0].scenario).unwrap();
        sim.summary().fast.expect("a fast run").unreported_flows > 0
    };
    assert!(keeps(&dlcp), "DLCP keeps the other servers' whole tensors by default");
    assert!(!keeps(&ps(sampled)), "DCTCP does not");
    // and with a packet standing for at most 4: 8 servers, 1 sampled, is m = 8
    let thin =
        dlcp.replace("workers = 12\nservers = 4", "workers = 8\nservers = 8").replace("servers = 2", "servers = 1");
    let e = Simulation::new(&load(&thin, &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "fast.servers", "{e}");
    assert!(e.to_string().contains("at least 2"), "{e}");
    // LTP the same, without keeping them
    let ltp = |t: &str| t.replace("kind = \"dlcp\"", "kind = \"ltp\"");
    assert!(Simulation::new(&load(&ltp(&dlcp), &[]).unwrap()[0].scenario).is_ok());
    let e = Simulation::new(&load(&ltp(&thin), &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "fast.servers", "{e}");
    let without = dlcp.replace("servers = 2", "servers = 2\nkeep_whole_tensors = false");
    let e = Simulation::new(&load(&without, &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "fast.keep_whole_tensors", "{e}");
    // NewReno as the default baseline runs it (CUBIC) was measured, with Reno's growth not
    let newreno = ps("fidelity = \"fast\"").replace("kind = \"dctcp\"", "kind = \"newreno\"");
    assert!(Simulation::new(&load(&newreno, &[]).unwrap()[0].scenario).is_ok());
    let reno = newreno.replace("kind = \"newreno\"", "kind = \"newreno\"\ntcp_cc = \"reno\"");
    let e = Simulation::new(&load(&reno, &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "transport.tcp_cc", "{e}");
    let chained = ps("fidelity = \"fast\"") + "iterations = 2\n";
    let e = Simulation::new(&load(&chained, &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "workload.iterations", "{e}");
    let colocated = ps("fidelity = \"fast\"").replace("colocated = false", "colocated = true");
    let e = Simulation::new(&load(&colocated, &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "workload.colocated", "{e}");
    // spraying and leaf-spines at 1:1: DCTCP, with a packet standing for at most 4
    let spray = ps("fidelity = \"fast\"\n[routing]\nmode = \"spray\"");
    assert!(Simulation::new(&load(&spray, &[]).unwrap()[0].scenario).is_ok());
    let e = Simulation::new(&load(&ltp(&spray.replace("\"dctcp\"", "\"dlcp\"")), &[]).unwrap()[0].scenario)
        .err()
        .expect("refused");
    assert_eq!(e.key, "routing.mode", "{e}");
    let leaf_spine = |uplinks: u32| {
        format!(
            "fidelity = \"fast\"\n[topology]\nleaves = 4\nhosts_per_leaf = 4\nspines = 2\n\
             uplinks_per_leaf = {uplinks}\n[workload]\nkind = \"ps\"\nworkers = 12\nservers = 4\n\
             push_bytes = 1000000\ncolocated = false\n"
        )
    };
    assert!(Simulation::new(&load(&leaf_spine(4), &[]).unwrap()[0].scenario).is_ok(), "1:1");
    let e = Simulation::new(&load(&leaf_spine(2), &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "topology.kind", "{e}");
    assert!(e.to_string().contains("oversubscribed"), "{e}");
    // DCTCP up to m = 10: 1 of 30 servers is m = 30, 2 is m = 15, and the fewest that pass
    // are 3 (m = 10)
    let wide = ps("fidelity = \"fast\"\n[fast]\nservers = 1")
        .replace("k = 4", "k = 6")
        .replace("workers = 12\nservers = 4", "workers = 20\nservers = 30");
    let e = Simulation::new(&load(&wide, &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "fast.servers", "{e}");
    assert!(e.to_string().contains("at least 3"), "{e}");
    assert!(Simulation::new(&load(&wide.replace("servers = 1", "servers = 2"), &[]).unwrap()[0].scenario).is_err());
    assert!(Simulation::new(&load(&wide.replace("servers = 1", "servers = 3"), &[]).unwrap()[0].scenario).is_ok());
    // sprayed, m = 4 at most: of 30 servers, 8 (m = 3.75)
    let sprayed = |n: u32| wide.replace("servers = 1", &format!("servers = {n}")) + "[routing]\nmode = \"spray\"\n";
    let e = Simulation::new(&load(&sprayed(7), &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "fast.servers", "{e}");
    assert!(e.to_string().contains("at least 8"), "{e}");
    assert!(Simulation::new(&load(&sprayed(8), &[]).unwrap()[0].scenario).is_ok());
    let forced = without.replace("servers = 2", "servers = 2\nunvalidated = true");
    assert!(Simulation::new(&load(&forced, &[]).unwrap()[0].scenario).is_ok());
}

#[test]
fn kept_whole_tensors_load_the_run_but_stay_out_of_its_results() {
    let sampled = "fidelity = \"fast\"\n[fast]\nservers = 2";
    let (plain, keep) = (run(&ps(sampled)), run(&ps(&format!("{sampled}\nkeep_whole_tensors = true"))));
    let extra = keep.flow_count() - plain.flow_count();
    assert!(extra > 0, "the other servers' whole tensors are simulated too");
    assert!(keep.conservation().holds());
    assert_eq!(keep.progress().flows_done, keep.flow_count() as u64, "every flow, kept ones too, finished");
    // the results are the sample's flows only, under the same ids
    let ids = |csv: String| {
        csv.lines().skip(1).map(|r| r.split(',').take(4).collect::<Vec<_>>().join(",")).collect::<Vec<_>>()
    };
    assert_eq!(ids(flows_csv(&keep)), ids(flows_csv(&plain)));
    let s = keep.summary();
    assert_eq!((s.flows, s.flows_finished), (plain.flow_count() as u64, plain.flow_count() as u64));
    let x = s.fast.as_ref().expect("a fast summary");
    assert_eq!(x.unreported_flows, extra as u64);
    // the job's iteration as it estimates it: the last finish of any flow, kept ones too
    let last = |sim: &Simulation| sim.flow_states().filter_map(|f| f.finished()).max().unwrap() / 1000;
    let reported_last =
        flows_csv(&keep).lines().skip(1).map(|r| r.split(',').nth(5).unwrap().parse::<u64>().unwrap()).max();
    assert_eq!(x.job_iteration_ns, Some(last(&keep)));
    assert!(x.job_iteration_ns >= reported_last, "{x:?}");
    assert_eq!(plain.summary().fast.unwrap().job_iteration_ns, None, "not estimated without them");
    let json = serde_json::to_value(plain.summary()).unwrap();
    assert!(json["fast"].get("unreported_flows").is_none(), "absent when nothing is left out: {json}");
    // a cover keeps every whole tensor in each sample and still writes every flow once
    let text = ps(&format!("{sampled}\ncover = true\nkeep_whole_tensors = true"));
    let mut cover = gradwire_sim::Runner::new(&load(&text, &[]).unwrap()[0].scenario).unwrap();
    cover.run();
    let packet_run = run(&ps(""));
    let packet = by_id(&flows_csv(&packet_run));
    assert_eq!(by_id(&cover.flows_csv()).keys().collect::<Vec<_>>(), packet.keys().collect::<Vec<_>>());
    // the job's figures as it estimates them: every whole tensor's flow for itself, each of
    // the sample's spread shards for the m it stands for, which counts the job's flows
    assert_eq!(x.job_flows, Some(packet_run.flow_count() as u64));
    let (mean, p50, p99) = (x.job_fct_mean_ns.unwrap(), x.job_fct_p50_ns.unwrap(), x.job_fct_p99_ns.unwrap());
    assert!(p50 <= p99 && p99 <= s.fct_max_ns.unwrap().max(x.job_iteration_ns.unwrap()) && mean > 0.0, "{x:?}");
    assert!(x.job_timeouts.is_some());
    let plain_fast = plain.summary().fast.unwrap();
    assert_eq!((plain_fast.job_flows, plain_fast.job_fct_mean_ns), (None, None), "not estimated without them");
    // weighing the whole tensors it simulates would count them twice
    let both = ps(&format!("{sampled}\nkeep_whole_tensors = true\nweigh_whole_tensors = true"));
    let e = Simulation::new(&load(&both, &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "fast.weigh_whole_tensors", "{e}");
}

/// The job of `sampled` with every server's whole tensors kept, and with those of the
/// servers sampled away thinned (and `thin`'s keys), which conserves its packets.
fn kept_and_thinned(sampled: &str, thin: &str) -> (Simulation, Simulation) {
    let keep = run(&ps(&format!("{sampled}\nkeep_whole_tensors = true")));
    let thinned = run(&ps(&format!("{sampled}\nthin_whole_tensors = true{thin}")));
    assert!(thinned.conservation().holds());
    (keep, thinned)
}

#[test]
fn thinned_whole_tensors_run_one_in_m_of_their_workers() {
    let sampled = "fidelity = \"fast\"\n[fast]\nservers = 2";
    let (keep, thin) = kept_and_thinned(sampled, "");
    assert_eq!(thin.progress().flows_done, thin.flow_count() as u64, "every flow finished");
    let (k, t) = (keep.summary(), thin.summary());
    let (kx, tx) = (k.fast.as_ref().unwrap(), t.fast.as_ref().unwrap());
    // m = 2: half of the 12 workers push and pull each whole tensor of a server sampled away
    assert!(tx.unreported_flows > 0 && tx.thinned && !kx.thinned, "{tx:?}");
    assert_eq!(2 * tx.unreported_flows, kx.unreported_flows);
    // the sample's own flows are the same flows; each thinned one stands for m
    assert_eq!(t.flows, k.flows);
    assert_eq!(tx.job_flows, Some(run(&ps("")).flow_count() as u64));
    assert!(tx.job_iteration_ns.is_some() && tx.job_fct_mean_ns.is_some(), "{tx:?}");
    // on two threads, the same run every time
    let two = || run(&ps("fidelity = \"fast\"\nthreads = 2\n[fast]\nservers = 2\nthin_whole_tensors = true"));
    let (a, b) = (two(), two());
    assert!(a.conservation().holds());
    assert_eq!(flows_csv(&a), flows_csv(&b));
    assert_eq!(a.summary().fast.unwrap().unreported_flows, tx.unreported_flows);
    let refused = |extra: &str, key: &str| {
        let e = Simulation::new(&load(&ps(extra), &[]).unwrap()[0].scenario).err().expect("refused");
        assert_eq!(e.key, key, "{extra}: {e}");
    };
    let thin = format!("{sampled}\nthin_whole_tensors = true");
    refused(&format!("{thin}\nkeep_whole_tensors = false"), "fast.thin_whole_tensors");
    refused(&format!("{thin}\n[switch]\nbuffer = \"shared\""), "fast.thin_whole_tensors");
    let ltp = ps(&thin).replace("kind = \"dctcp\"", "kind = \"ltp\"");
    let e = Simulation::new(&load(&ltp, &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "fast.thin_whole_tensors", "{e}");
    let colocated = ps(&format!("{thin}\nunvalidated = true"))
        .replace("workers = 12", "workers = 16")
        .replace("colocated = false", "colocated = true");
    let e = Simulation::new(&load(&colocated, &[]).unwrap()[0].scenario).err().expect("refused");
    assert_eq!(e.key, "fast.thin_whole_tensors", "{e}");
}

#[test]
fn a_thinned_flow_stands_for_thin_by_workers() {
    // 1 of 4 servers (m = 4), the other three's whole tensors thinned by 2: half of their
    // 12 workers, each standing for 2 in the job's figures
    let sampled = "fidelity = \"fast\"\n[fast]\nservers = 1";
    let (keep, thin) = kept_and_thinned(sampled, "\nthin_by = 2");
    let (k, t) = (keep.summary(), thin.summary());
    let (kx, tx) = (k.fast.as_ref().unwrap(), t.fast.as_ref().unwrap());
    assert_eq!((tx.stands_for, tx.thinned_by), (4.0, 2.0), "{tx:?}");
    assert_eq!(2 * tx.unreported_flows, kx.unreported_flows);
    assert_eq!(tx.job_flows, Some(run(&ps("")).flow_count() as u64), "the job's flows, each counted once");
    // by default a thinned flow stands for m
    let by_m = run(&ps(&format!("{sampled}\nthin_whole_tensors = true")));
    let bx = by_m.summary().fast.unwrap();
    assert_eq!((bx.thinned_by, 4 * bx.unreported_flows), (4.0, kx.unreported_flows));
    let refused = |extra: &str, key: &str, says: &str| {
        let e = Simulation::new(&load(&ps(&format!("{sampled}\n{extra}")), &[]).unwrap()[0].scenario)
            .err()
            .expect("refused");
        assert_eq!(e.key, key, "{extra}: {e}");
        assert!(e.to_string().contains(says), "{extra}: {e}");
    };
    refused("thin_by = 2", "fast.thin_by", "thin_whole_tensors is false");
    refused("thin_whole_tensors = true\nthin_by = 0", "fast.thin_by", "at least 1");
    // DCTCP's scale model was validated up to 10 workers per flow
    refused("thin_whole_tensors = true\nthin_by = 11", "fast.thin_by", "validated up to 10");
    let forced = ps(&format!("{sampled}\nthin_whole_tensors = true\nthin_by = 11\nunvalidated = true"));
    assert!(Simulation::new(&load(&forced, &[]).unwrap()[0].scenario).is_ok());
    refused("phantom = \"stretch\"\nthin_whole_tensors = true\nthin_by = 2", "fast.thin_by", "stands for m");
    // a sample thinner than that thins by 10: 2 of 30 servers is m = 15
    let wide = ps("fidelity = \"fast\"\n[fast]\nservers = 2\nthin_whole_tensors = true\nunvalidated = true")
        .replace("k = 4", "k = 6")
        .replace("workers = 12\nservers = 4", "workers = 20\nservers = 30");
    let s = &load(&wide, &[]).unwrap()[0].scenario;
    let x = Sample::plan(s, &Topology::build(&s.topology)).unwrap().expect("a fast run");
    assert_eq!((x.m, x.thin_by), (15.0, 10.0));
}

/// flows.csv's rows keyed by flow id, each without its id: (src, dst, size, ...).
fn by_id(csv: &str) -> std::collections::BTreeMap<u32, String> {
    csv.lines()
        .skip(1)
        .map(|r| {
            let (id, rest) = r.split_once(',').unwrap();
            (id.parse().unwrap(), rest.to_string())
        })
        .collect()
}

/// Columns of a flows.csv row (without its id) that say which flow it is, not how it went.
fn which(row: &str) -> Vec<&str> {
    let c: Vec<&str> = row.split(',').collect();
    vec![c[0], c[1], c[2], c[8], c[9], c[10]] // src, dst, size, iteration, pull, layer
}

#[test]
fn a_sample_keeps_the_jobs_flow_ids() {
    // a DNN job, and a plain PS exchange (one tensor over every server, then pulls)
    let plain = |extra: &str| {
        ps(extra)
            .replace("kind = \"dnn\"\nmodel = \"resnet18\"\npattern = \"ps\"", "kind = \"ps\"\npush_bytes = 400000")
    };
    for job in [ps, plain] {
        let packet = by_id(&flows_csv(&run(&job(""))));
        let fast = by_id(&flows_csv(&run(&job("fidelity = \"fast\"\n[fast]\nservers = 2\noffset = 1"))));
        assert!(!fast.is_empty() && fast.len() < packet.len(), "{} of {}", fast.len(), packet.len());
        for (id, row) in &fast {
            assert_eq!(which(row), which(&packet[id]), "flow {id}");
        }
    }
}

#[test]
fn a_cover_is_its_samples_merged_whatever_runs_them() {
    use gradwire_sim::Runner;
    let cover = |threads: u32| {
        let text = ps(&format!("fidelity = \"fast\"\nthreads = {threads}\n[fast]\nservers = 2\ncover = true"));
        let mut r = Runner::new(&load(&text, &[]).unwrap()[0].scenario).unwrap();
        r.run();
        r
    };
    let (one, two) = (cover(1), cover(2));
    assert_eq!(one.flows_csv(), two.flows_csv(), "samples one or two at a time: the same rows");
    // every sample's rows in a temporary file instead of memory: the same flows.csv
    let text = ps("fidelity = \"fast\"\nthreads = 2\n[fast]\nservers = 2\ncover = true");
    let mut spilled = gradwire_sim::cover::Cover::new(&load(&text, &[]).unwrap()[0].scenario).unwrap();
    spilled.spill_above(0);
    spilled.run();
    assert_eq!(spilled.flows_csv(), one.flows_csv(), "rows spilled to files: the same rows");
    let got = by_id(&one.flows_csv());
    // every flow of the job once, under its own id
    let packet = by_id(&flows_csv(&run(&ps(""))));
    assert_eq!(got.keys().collect::<Vec<_>>(), packet.keys().collect::<Vec<_>>());
    for (id, row) in &got {
        assert_eq!(which(row), which(&packet[id]), "flow {id}");
    }
    // each row is its sample's, as that sample run alone wrote it
    for offset in 0..2 {
        let alone =
            by_id(&flows_csv(&run(&ps(&format!("fidelity = \"fast\"\n[fast]\nservers = 2\noffset = {offset}")))));
        for (id, row) in alone {
            assert_eq!(got[&id], row, "flow {id} of sample {offset}");
        }
    }
    let s = one.summary();
    let x = s.fast.as_ref().expect("a fast summary");
    assert_eq!((x.servers.clone(), x.of, x.samples), (vec![9, 11, 13, 15], 4, 2));
    assert_eq!(s.flows, packet.len() as u64);
    assert!(one.conservation().holds() && s.packets.conserved);
    let (a, b) = (serde_json::to_value(&s).unwrap(), serde_json::to_value(two.summary()).unwrap());
    let c = serde_json::to_value(spilled.summary()).unwrap();
    for key in ["flows", "flows_finished", "fct_mean_ns", "fct_p50_ns", "fct_p99_ns", "retransmits", "timeouts"] {
        assert_eq!(a[key], b[key], "{key}");
        assert_eq!(a[key], c[key], "{key}, spilled");
    }
    for key in ["events", "packets", "drops", "fast"] {
        assert_eq!(a[key], b[key], "{key}");
    }
}

#[test]
fn a_cover_refuses_what_it_cannot_merge() {
    use gradwire_sim::Runner;
    // by the loader, or at the latest when the run is built
    let refused_text = |text: &str| match load(text, &[]) {
        Err(e) => e.key,
        Ok(runs) => Runner::new(&runs[0].scenario).err().expect("refused").key,
    };
    let refused = |extra: &str| refused_text(&ps(extra));
    assert_eq!(refused("[fast]\ncover = true"), "fast.cover", "a packet-level run has no samples");
    assert_eq!(refused("fidelity = \"fast\"\n[fast]\ncover = true\noffset = 1"), "fast.offset");
    assert_eq!(refused("fidelity = \"fast\"\n[fast]\ncover = true\n[output]\nlink_bytes = true"), "output.link_bytes");
    // the iteration it was not found within 5 % for, unless asked
    let cover = ps("fidelity = \"fast\"\n[fast]\ncover = true");
    assert_eq!(refused_text(&cover.replace("\"dctcp\"", "\"newreno\"")), "transport.kind");
    let lossy = cover.replace("k = 4\n", "k = 4\nlink_loss_rate = 0.001\n");
    assert_eq!(refused_text(&lossy), "topology.link_loss_rate");
    assert!(Runner::new(
        &load(&lossy.replace("cover = true", "cover = true\nunvalidated = true"), &[]).unwrap()[0].scenario
    )
    .is_ok());
    let text = ps("fidelity = \"fast\"\n[fast]\ncover = true");
    let e = Simulation::new(&load(&text, &[]).unwrap()[0].scenario).err().expect("a cover is a Runner");
    assert_eq!(e.key, "fast.cover", "{e}");
}

#[test]
fn a_cover_dropped_midway_stops_its_threads() {
    use gradwire_sim::Runner;
    let text = ps("fidelity = \"fast\"\nthreads = 2\n[fast]\nservers = 1\ncover = true");
    let mut r = Runner::new(&load(&text, &[]).unwrap()[0].scenario).unwrap();
    assert!(!r.step(1), "four samples are not over after one event");
    let p = r.progress();
    assert!(p.events >= 1 && !p.finished && p.flows_total > 0, "{p:?}");
    let began = std::time::Instant::now();
    drop(r); // joins the threads, each at the end of its slice of events
    assert!(began.elapsed() < std::time::Duration::from_secs(60), "{:?}", began.elapsed());
}

#[test]
fn a_check_refuses_what_building_would() {
    use gradwire_sim::Runner;
    let fast = ps("fidelity = \"fast\"");
    for text in [
        fast.replace("kind = \"dctcp\"", "kind = \"dlcp\""),
        ps("fidelity = \"fast\"\n[pauses]\nhosts = 1"),
        ps("fidelity = \"fast\"\n[fast]\ncover = true").replace("\"dctcp\"", "\"newreno\""),
        ps("fidelity = \"fast\"\n[fast]\ncover = true\nservers = 3"),
        fast.clone(),
        ps(""),
    ] {
        let s = &load(&text, &[]).unwrap()[0].scenario;
        let key = |e: gradwire_sim::ScenarioError| e.key;
        assert_eq!(Runner::check(s).err().map(key), Runner::new(s).err().map(key), "{text}");
    }
    // and what it would sample
    let s = &load(&fast, &[]).unwrap()[0].scenario;
    let x = Simulation::new(s).unwrap();
    let x = x.fast_sample().expect("a fast run");
    assert_eq!(Runner::check(s).unwrap(), Some((x.servers.len() as u32, x.of)));
    assert_eq!(Runner::check(&load(&ps(""), &[]).unwrap()[0].scenario).unwrap(), None);
}
