//! Steady requests on a thread of their own while a test changes something live: each answer
//! `ask` judges (`Ok`: what it said, `Err`: the failed answer whole), one every `every`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub struct Traffic {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<String>>>,
    failed: Arc<Mutex<Vec<String>>>,
    thread: JoinHandle<()>,
}

impl Traffic {
    pub fn start(
        every: Duration,
        ask: impl Fn() -> Result<String, String> + Send + 'static,
    ) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, seen, failed) = (stop.clone(), seen.clone(), failed.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match ask() {
                        Ok(answer) => seen.lock().unwrap().push(answer),
                        Err(whole) => failed.lock().unwrap().push(whole),
                    }
                    std::thread::sleep(every);
                }
            })
        };
        Traffic {
            stop,
            seen,
            failed,
            thread,
        }
    }

    /// What the good answers said so far.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    /// How many requests were answered so far, well or not.
    pub fn sent(&self) -> usize {
        self.seen.lock().unwrap().len() + self.failed.lock().unwrap().len()
    }

    /// Stops it: the good answers and the failed ones.
    pub fn stop(self) -> (Vec<String>, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        let seen = self.seen.lock().unwrap().clone();
        let failed = self.failed.lock().unwrap().clone();
        (seen, failed)
    }
}
