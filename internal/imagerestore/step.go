package imagerestore

// Step is a step of Fetch or Fetched.Unpack.
type Step int

const (
	StepOpenStore Step = iota + 1 // open cryo's local image store
	StepVerify                    // verify the pinned image's signature
	StepPull                      // read the registry's manifest, or pull
	StepRead                      // load the stored image, check its pin
	StepKind                      // refuse a bare process tree (FetchOptions.Container)
	StepCheck                     // the caller's FetchOptions.Check
	StepWorkDir                   // make the work directory
	StepUnpack                    // unpack verified, check it is what was loaded
	StepContents                  // the unpacked checkpoint has no container spec
)

// Failure is a failed step. Its message is its cause's, unchanged, so a
// front end may show it as it is or word the step its own way.
type Failure struct {
	Step Step
	Err  error
}

func (f *Failure) Error() string { return f.Err.Error() }

func (f *Failure) Unwrap() error { return f.Err }

// fail marks err as the failure of step.
func fail(step Step, err error) error { return &Failure{Step: step, Err: err} }
