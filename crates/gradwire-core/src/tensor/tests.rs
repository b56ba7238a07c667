use std::ops::Range;

use proptest::prelude::*;

use super::*;
use crate::testkit::XorShift;

#[test]
fn segmentation_rejects_bad_parameters() {
    assert_eq!(Segmentation::new(0, 100, 0, 1460), Err(SegmentError::ZeroElementSize));
    assert_eq!(
        Segmentation::new(0, 100, 2000, 1460),
        Err(SegmentError::ElementLargerThanMss { elem_bytes: 2000, mss: 1460 })
    );
    let s = Segmentation::new(9, 0, 4, 1460).unwrap();
    assert_eq!((s.count(), s.iter().count()), (0, 0));
    // 1460 / 4 = 365 elements per segment; 1460 / 8 = 182 elements (1456 bytes).
    assert_eq!(Segmentation::new(0, 10_000, 4, 1460).unwrap().seg_bytes(), 1460);
    assert_eq!(Segmentation::new(0, 10_000, 8, 1460).unwrap().seg_bytes(), 1456);
}

proptest! {
    #[test]
    fn segments_cover_tensor_exactly_and_keep_elements_whole(
        n in 0u64..20_000, elem in prop::sample::select(vec![1u32, 2, 4, 8, 12]), mss in 12u32..3000, id: u32,
    ) {
        let s = Segmentation::for_elems(id, n, elem, mss).unwrap();
        let mut next = 0;
        let segs: Vec<Segment> = s.iter().collect();
        for (i, g) in segs.iter().enumerate() {
            prop_assert_eq!(g.tensor, id);
            prop_assert_eq!(g.index, i as u64);
            prop_assert_eq!(g.offset, next);
            prop_assert!(g.len > 0 && g.len <= mss);
            prop_assert_eq!(g.offset % elem as u64, 0);
            prop_assert_eq!(g.len % elem, 0);
            if i + 1 < segs.len() {
                prop_assert_eq!(g.len, s.seg_bytes());
            } else {
                prop_assert!(g.len <= s.seg_bytes());
            }
            prop_assert_eq!(s.locate(g.offset, g.len), Ok(g.index));
            next = g.end();
        }
        prop_assert_eq!(next, n * elem as u64);
    }

    #[test]
    fn random_order_reassembly_equals_original(
        n in 0u64..5000, mss in 4u32..2000, seed in 1u64.., drop_pct in 0u64..50,
    ) {
        let seg = Segmentation::for_elems(3, n, 4, mss).unwrap();
        let mut rng = XorShift(seed);
        let original: Vec<u8> = (0..seg.total_bytes()).map(|_| (rng.next() % 255 + 1) as u8).collect();
        let mut order: Vec<Segment> = seg.iter().collect();
        rng.shuffle(&mut order);
        let mut buf = TensorBuffer::new(seg);
        let mut lost: Vec<u64> = Vec::new();
        for g in &order {
            if rng.next() % 100 < drop_pct {
                lost.push(g.index);
                continue;
            }
            let bytes = &original[g.offset as usize..g.end() as usize];
            prop_assert_eq!(buf.place(g.offset, bytes), Ok(Placed::New(g.index)));
            // A duplicate is recognised and changes nothing.
            prop_assert_eq!(buf.place(g.offset, bytes), Ok(Placed::Duplicate(g.index)));
        }
        lost.sort_unstable();
        let expected: Vec<Range<u64>> = merge(lost.iter().map(|&i| {
            let g = seg.segment(i).unwrap();
            g.offset..g.end()
        }));
        let got = buf.fill_bubbles();
        prop_assert_eq!(&got, &expected);
        prop_assert_eq!(buf.reassembly().bubbles(), expected.clone());
        let missing: u64 = expected.iter().map(|r| r.end - r.start).sum();
        prop_assert_eq!(buf.reassembly().missing_bytes(), missing);
        let mut want = original.clone();
        for r in &expected {
            want[r.start as usize..r.end as usize].fill(0);
        }
        prop_assert_eq!(buf.as_bytes(), &want[..]);
        if lost.is_empty() {
            prop_assert_eq!(buf.as_bytes(), &original[..]);
            prop_assert!(buf.reassembly().is_complete());
        }
        let frac = buf.reassembly().delivered_fraction();
        prop_assert!((0.0..=1.0).contains(&frac));
    }

    #[test]
    fn malformed_segments_are_rejected_and_counted(
        total in 0u64..10_000, offset in prop_oneof![0u64..12_000, any::<u64>()],
        len in prop_oneof![0u32..2000, any::<u32>()], payload_len in 0usize..3000,
    ) {
        let seg = Segmentation::new(1, total, 4, 1460).unwrap();
        let mut r = Reassembly::new(seg);
        let ok = seg.locate(offset, len).is_ok();
        prop_assert_eq!(r.insert(offset, len).is_ok(), ok);
        prop_assert_eq!(r.rejected(), (!ok) as u64);
        prop_assert!(r.received_bytes() <= total);
        // The buffer variant never writes outside itself (indexing would panic).
        let mut b = TensorBuffer::new(seg);
        let _ = b.place(offset, &vec![7u8; payload_len]);
        prop_assert_eq!(b.as_bytes().len() as u64, total);
    }
}

/// Merge sorted, possibly adjacent ranges.
fn merge(it: impl Iterator<Item = Range<u64>>) -> Vec<Range<u64>> {
    let mut out: Vec<Range<u64>> = Vec::new();
    for r in it {
        match out.last_mut() {
            Some(l) if l.end == r.start => l.end = r.end,
            _ => out.push(r),
        }
    }
    out
}

#[test]
fn specific_rejections() {
    // 10 elements of 4 bytes in segments of 3 elements: 12, 12, 12, 4.
    let seg = Segmentation::for_elems(1, 10, 4, 14).unwrap();
    let mut r = Reassembly::new(seg);
    assert_eq!(r.insert(40, 4), Err(Reject::OutOfRange));
    assert_eq!(r.insert(36, 8), Err(Reject::OutOfRange));
    assert_eq!(r.insert(u64::MAX, u32::MAX), Err(Reject::OutOfRange));
    assert_eq!(r.insert(4, 12), Err(Reject::Misaligned));
    assert_eq!(r.insert(12, 8), Err(Reject::WrongLength));
    assert_eq!(r.insert(36, 0), Err(Reject::WrongLength));
    assert_eq!(r.rejected(), 6);
    assert_eq!(r.received_bytes(), 0);
    assert_eq!(r.insert(36, 4), Ok(Placed::New(3)));
    assert_eq!(r.insert(12, 12), Ok(Placed::New(1)));
    assert_eq!(r.bubbles(), vec![0..12, 24..36]);
    assert_eq!(r.missing_runs(), vec![0..1, 2..3]);
    assert!((r.delivered_fraction() - 0.4).abs() < 1e-12);
}

#[test]
fn bubbles_across_bitmap_words() {
    let seg = Segmentation::new(0, 200 * 10, 1, 10).unwrap();
    let mut r = Reassembly::new(seg);
    for i in (0..200).filter(|i| !(60..130).contains(i) && *i != 199) {
        r.insert(i * 10, 10).unwrap();
    }
    assert_eq!(r.bubbles(), vec![600..1300, 1990..2000]);
}

#[test]
fn layer_priority_matches_formula() {
    for (layers, prios) in [(1u32, 1u8), (10, 7), (7, 7), (50, 3), (152, 7), (3, 7), (100, 4)] {
        let mut last = 0;
        for x in 0..layers {
            let p = layer_priority(x, layers, prios);
            assert_eq!(p as u64, x as u64 * prios as u64 / layers as u64, "L={layers} P={prios} x={x}");
            assert!(p < prios);
            assert!(p >= last, "front layers never get a lower priority than later ones");
            last = p;
            assert_eq!(layer_queue(x, layers, prios), p + 1);
            assert!(layer_queue(x, layers, prios) > CTRL_QUEUE);
        }
        // Every data priority is used when there are at least as many layers.
        if layers >= prios as u32 {
            assert_eq!(layer_priority(layers - 1, layers, prios), prios - 1);
        }
    }
    assert_eq!(layer_priority(99, 10, 7), 6); // clamped layer
    assert_eq!(layer_queue(9, 10, 200), 7); // clamped priorities
    assert_eq!(layer_priority(0, 0, 7), 0);
}

#[test]
fn importance_against_exact_median() {
    let mut rng = XorShift(0x1234_5678);
    // Heavy-tailed magnitudes, signs mixed.
    let grads: Vec<f32> = (0..200_000)
        .map(|_| {
            let m = (-rng.unit().max(1e-12).ln()) as f32;
            if rng.next() & 1 == 0 {
                m
            } else {
                -m
            }
        })
        .collect();
    let mut sorted: Vec<f32> = grads.iter().map(|g| g.abs()).collect();
    sorted.sort_unstable_by(f32::total_cmp);
    let exact = sorted[(sorted.len() - 1) / 2];
    // A full "sample" is the exact median.
    assert_eq!(sample_median_abs(&grads, 1.0), exact);
    // The 0.1% sample (200 elements) lands near the true median (the 50% quantile).
    let est = sample_median_abs(&grads, MEDIAN_SAMPLE_FRACTION);
    let q = sorted.partition_point(|&v| v < est) as f64 / sorted.len() as f64;
    assert!((0.40..=0.60).contains(&q), "sampled median at quantile {q}");
    // One element per segment, exact threshold: exactly the upper half is important.
    let m = importance_with_threshold(&grads, 1, exact);
    assert_eq!(m.iter().filter(|&&b| b).count(), grads.iter().filter(|g| g.abs() >= exact).count());
    // The mask is the definition, segment by segment (365 floats per segment).
    let mask = importance_mask(&grads, 365);
    assert_eq!(mask.len(), grads.len().div_ceil(365));
    for (i, c) in grads.chunks(365).enumerate() {
        let mean = c.iter().map(|g| g.abs() as f64).sum::<f64>() / c.len() as f64;
        assert_eq!(mask[i], mean >= est as f64);
    }
    // At least one element is sampled from a tiny tensor.
    assert_eq!(sample_median_abs(&[-3.0], MEDIAN_SAMPLE_FRACTION), 3.0);
    assert_eq!(sample_median_abs(&[], MEDIAN_SAMPLE_FRACTION), 0.0);
}

#[test]
fn synthetic_importance_is_seeded_and_near_fraction() {
    let count = |seed| (0..10_000).filter(|&i| synthetic_important(seed, 5, i, 0.3)).count();
    assert_eq!(count(1), count(1));
    assert!((2700..3300).contains(&count(1)));
    assert!((0..100).all(|i| synthetic_important(9, 1, i, 1.0)));
    assert!((0..100).all(|i| !synthetic_important(9, 1, i, 0.0)));
}
