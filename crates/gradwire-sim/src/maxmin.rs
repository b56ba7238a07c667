//! Max-min fair rates by progressive filling, the one solver behind both fluid models: the
//! ideal rows' relaxed fabric (`ideal`) and ByteScheduler's host-NIC network
//! (`bytesched::fluid`).

/// Reusable scratch space; `solve` allocates only when the problem outgrows it.
#[derive(Debug, Default)]
pub struct MaxMin {
    residual: Vec<f64>,
    users: Vec<Vec<u32>>,
    unfrozen: Vec<u32>,
    frozen: Vec<bool>,
}

impl MaxMin {
    /// Sets `rate[f]` for every user `f` in `active`, where `path(f)` lists the resources
    /// `f` uses and `cap` their capacities: repeatedly the most constrained resource (least
    /// residual capacity per unfrozen user; the lowest index on a tie) fixes the rate of
    /// its unfrozen users, in `active`'s order, and leaves the rest of them its capacity.
    pub fn solve<I>(&mut self, active: &[u32], path: impl Fn(u32) -> I, cap: &[f64], rate: &mut [f64])
    where
        I: IntoIterator<Item = usize>,
    {
        self.residual.clear();
        self.residual.extend_from_slice(cap);
        self.users.resize_with(cap.len(), Vec::new);
        for u in self.users.iter_mut() {
            u.clear();
        }
        for &f in active {
            for r in path(f) {
                self.users[r].push(f);
            }
        }
        self.unfrozen.clear();
        self.unfrozen.extend(self.users[..cap.len()].iter().map(|u| u.len() as u32));
        if self.frozen.len() < rate.len() {
            self.frozen.resize(rate.len(), false);
        }
        for &f in active {
            self.frozen[f as usize] = false;
        }
        let mut left = active.len();
        while left > 0 {
            let mut best = usize::MAX;
            let mut share = f64::INFINITY;
            for r in 0..cap.len() {
                if self.unfrozen[r] > 0 {
                    let s = self.residual[r] / self.unfrozen[r] as f64;
                    if s < share {
                        share = s;
                        best = r;
                    }
                }
            }
            if best == usize::MAX {
                break; // the rest use no resource
            }
            let share = share.max(0.0);
            for i in 0..self.users[best].len() {
                let f = self.users[best][i];
                if self.frozen[f as usize] {
                    continue;
                }
                self.frozen[f as usize] = true;
                rate[f as usize] = share;
                left -= 1;
                for r in path(f) {
                    self.residual[r] -= share;
                    self.unfrozen[r] -= 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bottleneck_is_shared_and_what_it_leaves_goes_to_the_others() {
        // resource 0 (cap 3) carries users 0, 1, 2; resource 1 (cap 10) users 2 and 3
        let paths = [vec![0], vec![0], vec![0, 1], vec![1]];
        let mut rate = vec![f64::NAN; 4];
        MaxMin::default().solve(&[0, 1, 2, 3], |f| paths[f as usize].iter().copied(), &[3.0, 10.0], &mut rate);
        assert_eq!(rate, vec![1.0, 1.0, 1.0, 9.0]);
    }

    #[test]
    fn users_without_a_resource_are_left_alone() {
        let mut rate = vec![7.0, f64::NAN];
        MaxMin::default().solve(&[0, 1], |f| if f == 1 { vec![0] } else { vec![] }, &[2.0], &mut rate);
        assert_eq!(rate, vec![7.0, 2.0]);
    }
}
