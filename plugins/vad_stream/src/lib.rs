//! Speech segments streamed out of audio: a decoupled model that runs the `silero_vad_frame` model over `AUDIO`
//! (FP32 samples at 16 kHz) one 32 ms frame at a time, through BLS, and sends each speech segment as soon as
//! it is over, as a response with `START` and `END` in seconds. A segment still open when the audio ends
//! ends there.
//!
//! The segmentation is silero-vad's streaming one (`VADIterator`): a frame whose speech probability reaches
//! the threshold (0.5, or the request parameter `threshold`) starts a segment; one below the threshold less
//! 0.15 starts a silence, and a silence of 100 ms ends the segment; both ends are padded by 30 ms. Each
//! frame is given to the model with the 64 samples before it, and the model's state carries from frame to
//! frame, as silero-vad's own ONNX wrapper does.

use tessera_plugin::{infer, Args, DecoupledModel, ParameterValue, Request, Response, Sender, Tensor};

const RATE: usize = 16_000;
const FRAME: usize = 512;
const CONTEXT: usize = 64;
const STATE: usize = 2 * 128;
const MIN_SILENCE: usize = RATE / 10;
const PAD: usize = RATE * 30 / 1000;
const DEFAULT_THRESHOLD: f32 = 0.5;

struct VadStream;

/// Where the segmentation stands, in samples.
struct Segmenter {
    threshold: f32,
    /// Samples seen, up to the end of the current frame.
    seen: usize,
    /// The start of the open segment.
    start: Option<usize>,
    /// Where the current silence inside a segment began.
    silence_from: Option<usize>,
}

impl Segmenter {
    /// Takes one frame's speech probability; a segment that this frame ends, as (start, end).
    fn step(&mut self, probability: f32) -> Option<(usize, usize)> {
        self.seen += FRAME;
        if probability >= self.threshold {
            self.silence_from = None;
            if self.start.is_none() {
                self.start = Some(self.seen.saturating_sub(PAD + FRAME));
            }
            return None;
        }
        let start = self.start?;
        if probability >= self.threshold - 0.15 {
            return None;
        }
        let silence_from = *self.silence_from.get_or_insert(self.seen);
        if self.seen - silence_from < MIN_SILENCE {
            return None;
        }
        self.start = None;
        self.silence_from = None;
        Some((start, silence_from + PAD - FRAME))
    }
}

fn seconds(samples: usize) -> f32 {
    samples as f32 / RATE as f32
}

fn segment(start: usize, end: usize) -> Response {
    Response::new(vec![Tensor::new("START", [1], &[seconds(start)]), Tensor::new("END", [1], &[seconds(end)])])
}

/// The probability that `frame` (with its context in front) is speech, and the model's next state.
fn score(frame: &[f32], state: &[f32]) -> Result<(f32, Vec<f32>), String> {
    let inputs = vec![
        Tensor::new("input", [1, frame.len() as i64], frame),
        Tensor::new("state", [2, 1, 128], state),
        Tensor::new("sr", [1], &[RATE as i64]),
    ];
    let response = infer("silero_vad_frame", Request::new(inputs))?;
    let probability =
        response.output("output")?.values::<f32>()?.first().copied().ok_or("silero_vad_frame gave no output")?;
    Ok((probability, response.output("stateN")?.values::<f32>()?))
}

impl DecoupledModel for VadStream {
    fn initialize(_args: &Args) -> Result<Self, String> {
        Ok(VadStream)
    }

    fn execute(&mut self, request: Request, sender: Sender) -> Result<(), String> {
        let threshold = match request.parameter("threshold") {
            Some(ParameterValue::Double(value)) => *value as f32,
            Some(ParameterValue::Int(value)) => *value as f32,
            _ => DEFAULT_THRESHOLD,
        };
        let audio = request.input("AUDIO")?.values::<f32>()?;
        let mut segmenter = Segmenter { threshold, seen: 0, start: None, silence_from: None };
        let mut state = vec![0f32; STATE];
        let mut window = vec![0f32; CONTEXT + FRAME];
        for frame in audio.chunks(FRAME) {
            if sender.is_cancelled() {
                return Ok(());
            }
            // The last frame is padded with silence to a whole frame.
            window.copy_within(FRAME.., 0);
            window[CONTEXT..].fill(0.0);
            window[CONTEXT..CONTEXT + frame.len()].copy_from_slice(frame);
            let (probability, next) = score(&window, &state)?;
            state = next;
            if let Some((start, end)) = segmenter.step(probability) {
                sender.send(segment(start, end))?;
            }
        }
        match segmenter.start {
            Some(start) => sender.send_final(segment(start, audio.len())),
            None => sender.finish(),
        }
    }
}

tessera_plugin::export_decoupled!(VadStream);
