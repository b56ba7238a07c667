use super::*;

fn cfg(model: &str, pattern: Pattern) -> JobCfg {
    let mut c: JobCfg = serde_json::from_str(&format!(r#"{{"model": "{model}"}}"#)).unwrap();
    c.pattern = pattern;
    c
}

fn speed(c: &JobCfg, iterations: u32) -> f64 {
    let mut job = Job::new(c.clone()).unwrap();
    let stats = job.run(iterations).unwrap();
    // the first iteration has no update to wait for: leave it out
    let steady = &stats[1..];
    steady.iter().map(|s| s.samples_per_s).sum::<f64>() / steady.len() as f64
}

#[test]
fn a_job_is_deterministic() {
    for pattern in [Pattern::Ps, Pattern::Ring] {
        let mut c = cfg("resnet50", pattern);
        c.background.push(BackgroundJob {
            join_iteration: 1,
            leave_iteration: Some(3),
            flows: 2,
            compute_factor: 1.3,
            workers: None,
        });
        let a = Job::new(c.clone()).unwrap().run(4).unwrap().to_vec();
        let b = Job::new(c).unwrap().run(4).unwrap().to_vec();
        assert_eq!(a, b);
    }
}

/// Every byte of every iteration is pushed and pulled (or all-reduced) exactly once while
/// ⟨S_p, S_c⟩ changes every iteration, rates change, another job comes and goes and the PS
/// servers queue the pushes they process.
#[test]
fn changing_the_configuration_between_iterations_loses_no_partition() {
    let configs = [
        SchedCfg::new(2_000_000, 1),
        SchedCfg::new(8_000_000, 3),
        SchedCfg::UNSCHEDULED,
        SchedCfg::new(160_000, 1),
        SchedCfg::new(1_000_000, 8),
        SchedCfg { fifo: true, ..SchedCfg::new(4_000_000, 2) },
    ];
    for pattern in [Pattern::Ps, Pattern::Ring] {
        let mut c = cfg("resnet50", pattern);
        c.workers = 4;
        c.rate_changes.push(RateChange { iteration: 2, gbps: 3.0, workers: Some(vec![1]) });
        c.background.push(BackgroundJob {
            join_iteration: 3,
            leave_iteration: Some(5),
            flows: 1,
            compute_factor: 2.0,
            workers: None,
        });
        c.slowdowns.push(Slowdown { worker: 2, from_iteration: 1, to_iteration: Some(4), factor: 1.5 });
        c.ps_server_overhead_us = 300.0;
        let mut job = Job::new(c).unwrap();
        for (k, s) in configs.iter().enumerate() {
            job.set_sched(*s).unwrap();
            let st = job.run(1).unwrap()[0].clone();
            assert_eq!(st.iteration, k as u32);
            assert_eq!(st.partition_bytes, s.partition_bytes, "{pattern:?} iteration {k}");
            assert!(st.partitions > 0);
        }
        job.drain();
        assert!(job.settled(), "{pattern:?}");
        let total = job.model.total_bytes * configs.len() as u64;
        match pattern {
            Pattern::Ps => {
                assert!(job.moved().pushed.iter().all(|&b| b == total), "{:?}", job.moved());
                assert!(job.moved().pulled.iter().all(|&b| b == total), "{:?}", job.moved());
            }
            Pattern::Ring => assert_eq!(job.moved().reduced, total),
        }
    }
}

/// The paper's reason for priority (§II-C): the next forward pass needs the front layers
/// first. With the same partitions and credit, front-layer-first starts the next forward
/// earlier than the framework's back-to-front order and trains faster; with no forward
/// compute to overlap (all compute moved into backward) the gain disappears.
#[test]
fn front_layer_first_beats_fifo_because_forward_can_start_early() {
    for pattern in [Pattern::Ps, Pattern::Ring] {
        // communication about as long as compute, so that there is something to overlap
        let mut front = cfg("resnet50", pattern);
        front.host_gbps = 25.0;
        front.sched = SchedCfg::new(2_000_000, 4);
        let mut fifo = front.clone();
        fifo.sched.fifo = true;
        let (vf, vq) = (speed(&front, 4), speed(&fifo, 4));
        eprintln!("{pattern:?}: front {vf:.1} fifo {vq:.1}");
        assert!(vf > 1.05 * vq, "{pattern:?}: front {vf} vs fifo {vq}");

        let no_overlap = |mut c: JobCfg| {
            let mut job = Job::new(c.clone()).unwrap();
            for l in &mut job.model.layers {
                l.bwd_time_s += l.fwd_time_s;
                l.fwd_time_s = 0.0;
            }
            c.workers = job.n;
            let st = job.run(4).unwrap();
            st[1..].iter().map(|s| s.samples_per_s).sum::<f64>() / 3.0
        };
        let (nf, nq) = (no_overlap(front.clone()), no_overlap(fifo.clone()));
        let (with, without) = (vf / vq - 1.0, nf / nq - 1.0);
        eprintln!("{pattern:?}: front-first gain {with:.3} with forward overlap, {without:.3} without");
        assert!(with > without + 0.05, "{pattern:?}: gain {with} with forward, {without} without");
    }
}

#[test]
fn conditions_move_the_speed_the_way_they_should() {
    let base = cfg("resnet50", Pattern::Ps);
    let v = speed(&base, 3);
    let mut slow_net = base.clone();
    slow_net.host_gbps = 3.0;
    assert!(speed(&slow_net, 3) < 0.7 * v);
    // another job on every host, then gone again
    let mut shared = base.clone();
    shared.background.push(BackgroundJob {
        join_iteration: 2,
        leave_iteration: Some(4),
        flows: 1,
        compute_factor: 1.0,
        workers: None,
    });
    let mut job = Job::new(shared).unwrap();
    let st = job.run(6).unwrap().to_vec();
    assert!(st[3].samples_per_s < 0.9 * st[1].samples_per_s, "{} vs {}", st[3].samples_per_s, st[1].samples_per_s);
    let back = st[5].samples_per_s / st[1].samples_per_s;
    assert!((back - 1.0).abs() < 0.05, "{back}");
    // one straggler slows the synchronous job
    let mut straggler = base.clone();
    straggler.slowdowns.push(Slowdown { worker: 3, from_iteration: 0, to_iteration: None, factor: 6.0 });
    assert!(speed(&straggler, 3) < 0.9 * v);
}

/// Partitions far below the overhead's worth pay for it, and a credit of one partition
/// leaves the link idle while each partition's overhead is paid.
#[test]
fn tiny_partitions_and_a_one_partition_credit_do_not_pay() {
    let mut c = cfg("resnet50", Pattern::Ps);
    let mut at = |p: u64, k: u64| {
        c.sched = SchedCfg::new(p, k);
        speed(&c, 3)
    };
    let (tiny, good, stop_and_wait) = (at(100_000, 8), at(2_000_000, 8), at(2_000_000, 1));
    assert!(tiny < 0.8 * good, "{tiny} vs {good}");
    assert!(stop_and_wait < 0.8 * good, "{stop_and_wait} vs {good}");
}

/// With MXNet's `dist_sync` credit (returned once every worker's push is aggregated) a
/// partition holds its credit while the other workers catch up: never faster than the
/// default, and a one-partition credit deadlocks as soon as two workers' windows hold
/// different partitions, which the job reports instead of hanging.
#[test]
fn an_aggregated_credit_waits_for_every_worker_and_can_deadlock() {
    let mut c = cfg("resnet50", Pattern::Ps);
    c.workers = 4;
    c.sched = SchedCfg::new(14_000_000, 1);
    let own = speed(&c, 3);
    c.ps_credit = PsCredit::Aggregated;
    let all = speed(&c, 3);
    assert!(all < own, "{all} vs {own}");
    c.sched = SchedCfg::new(2_000_000, 1);
    let err = Job::new(c).unwrap().run(3).unwrap_err();
    assert!(err.contains("stalled"), "{err}");
}

/// A PS server that spends time on every push delays each aggregate, so more, smaller
/// partitions pay more: ⟨2 MB⟩ loses more of its speed than ⟨16 MB⟩ does.
#[test]
fn a_busy_server_costs_small_partitions_more() {
    let mut c = cfg("resnet50", Pattern::Ps);
    c.workers = 4;
    let mut at = |server_us: f64, p: u64, k: u64| {
        c.ps_server_overhead_us = server_us;
        c.sched = SchedCfg::new(p, k);
        speed(&c, 3)
    };
    let small = at(2000.0, 2_000_000, 6) / at(0.0, 2_000_000, 6);
    let large = at(2000.0, 16_000_000, 2) / at(0.0, 16_000_000, 2);
    assert!(small < 0.9 && small < large - 0.05, "{small} vs {large}");
}

#[test]
fn bad_configurations_are_refused_with_their_key() {
    let mut c = cfg("resnet50", Pattern::Ps);
    c.host_gbps = 0.0;
    assert!(Job::new(c).err().unwrap().starts_with("host_gbps"));
    let mut c = cfg("resnet50", Pattern::Ps);
    c.sched = SchedCfg { partition_bytes: Some(4), credit_bytes: Some(2), fifo: false };
    assert!(Job::new(c).err().unwrap().starts_with("sched"));
    assert!(serde_json::from_str::<JobCfg>(r#"{"model": "resnet50", "typo": 1}"#).is_err());
}

#[test]
#[ignore = "prints the speed grid"]
fn print_grid() {
    let model = std::env::var("GRID_MODEL").unwrap_or("resnet50".into());
    let gbps: f64 = std::env::var("GRID_GBPS").map(|s| s.parse().unwrap()).unwrap_or(10.0);
    let pattern = if std::env::var("GRID_RING").is_ok() { Pattern::Ring } else { Pattern::Ps };
    let mut c = cfg(&model, pattern);
    c.host_gbps = gbps;
    c.sched = SchedCfg::UNSCHEDULED;
    eprintln!("unscheduled {:.1}", speed(&c, 3));
    for p in [1u64, 2, 4, 6, 8, 12, 16] {
        let row: Vec<String> = (1..=8)
            .map(|k| {
                c.sched = SchedCfg::new(p * 1_000_000, k);
                format!("{:7.1}", speed(&c, 3))
            })
            .collect();
        eprintln!("{p:3} MB {}", row.join(" "));
    }
}
